/*
 * base64 encoder and decoder: RFC 4648 vectors, round trips of every length and byte value,
 * and rejection of every kind of malformed input the network could deliver.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bagua/error.h"
#include "common/etcd/base64.h"
#include "test.h"

static void check_vector(const char *plain, const char *enc) {
  char buf[64];
  size_t n = bagua__base64_encode(plain, strlen(plain), buf);
  ASSERT_EQ(n, strlen(enc));
  ASSERT_EQ(n, bagua__base64_encoded_len(strlen(plain)));
  ASSERT_STREQ(buf, enc);
  char *dec = NULL;
  size_t len = 0;
  ASSERT_OK(bagua__base64_decode_alloc(enc, strlen(enc), &dec, &len));
  ASSERT_EQ(len, strlen(plain));
  ASSERT_TRUE(memcmp(dec, plain, len) == 0);
  ASSERT_EQ(dec[len], '\0');
  free(dec);
}

static void check_rejected(const char *enc) {
  unsigned char out[64];
  size_t len = 0;
  bagua_status_t st = bagua__base64_decode(enc, strlen(enc), out, sizeof(out), &len);
  if (st != BAGUA_ERR_INVALID_ARG) TEST_FAIL("\"%s\" was accepted as base64", enc);
  char *dec = (char *)0x1;
  ASSERT_STATUS(bagua__base64_decode_alloc(enc, strlen(enc), &dec, &len), BAGUA_ERR_INVALID_ARG);
}

int main(void) {
  /* RFC 4648 section 10. */
  check_vector("", "");
  check_vector("f", "Zg==");
  check_vector("fo", "Zm8=");
  check_vector("foo", "Zm9v");
  check_vector("foob", "Zm9vYg==");
  check_vector("fooba", "Zm9vYmE=");
  check_vector("foobar", "Zm9vYmFy");
  /* The characters that differ from the URL-safe alphabet. */
  check_vector("\xfb\xff\xbf", "+/+/");

  /* Every length up to 300 with every byte value, including NUL and 0xff. */
  unsigned char src[300], dec[300];
  char enc[401];
  uint32_t x = 12345;
  for (size_t i = 0; i < sizeof(src); i++) {
    x = x * 1103515245u + 12345u;
    src[i] = (unsigned char)(i < 256 ? i : x >> 16);
  }
  for (size_t n = 0; n <= sizeof(src); n++) {
    size_t m = bagua__base64_encode(src, n, enc);
    ASSERT_EQ(m, bagua__base64_encoded_len(n));
    ASSERT_EQ(enc[m], '\0');
    size_t len = 0;
    ASSERT_OK(bagua__base64_decode(enc, m, dec, bagua__base64_decoded_max(m), &len));
    ASSERT_EQ(len, n);
    ASSERT_TRUE(memcmp(src, dec, n) == 0);
  }

  /* Malformed input. */
  check_rejected("Z");          /* length not a multiple of 4 */
  check_rejected("Zg=");        /* truncated padding */
  check_rejected("Zm9vY");      /* truncated quantum */
  check_rejected("Zm9v!A==");   /* character outside the alphabet */
  check_rejected("Zm9v\nYmFy"); /* whitespace is not skipped */
  check_rejected("Zm-_");       /* URL-safe alphabet */
  check_rejected("Zg==Zg==");   /* padding before the end */
  check_rejected("Z===");       /* three padding characters */
  check_rejected("====");       /* only padding */
  check_rejected("=Zm9");       /* padding first */
  check_rejected("Zm=v");       /* padding in the middle of the last quantum */
  check_rejected("Zh==");       /* non-zero bits after the last byte */
  check_rejected("Zm9=");       /* non-zero bits after the last byte */
  {
    const char with_nul[] = "Zm\0v";
    unsigned char out[8];
    size_t len;
    ASSERT_STATUS(bagua__base64_decode(with_nul, 4, out, sizeof(out), &len), BAGUA_ERR_INVALID_ARG);
  }

  /* A buffer one byte too small is refused rather than overrun. */
  {
    unsigned char out[5];
    size_t len = 0;
    ASSERT_STATUS(bagua__base64_decode("Zm9vYmFy", 8, out, sizeof(out), &len),
                  BAGUA_ERR_INVALID_ARG);
    ASSERT_OK(bagua__base64_decode("Zm9vYmE=", 8, out, sizeof(out), &len));
    ASSERT_EQ(len, 5);
  }
  printf("PASS test_etcd_base64\n");
  return 0;
}
