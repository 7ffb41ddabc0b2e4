/* User-facing lines of the command-line tools (see output.h). */
#include "output.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/params.h"
#include "common/time.h"

void bagua__vsay(const char *tool, const char *fmt, va_list ap) {
  char line[2048], when[40] = "";
  if (bagua__param_int(BAGUA_P_LOG_TIME)) {
    bagua__format_wall_ms(bagua__wall_ms(), when, sizeof(when) - 1);
    strcat(when, " ");
  }
  int n = tool ? snprintf(line, sizeof(line), "%s%s: ", when, tool)
               : snprintf(line, sizeof(line), "%s", when);
  if (n < 0) n = 0;
  if ((size_t)n > sizeof(line) - 2) n = (int)sizeof(line) - 2;
  int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
  size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
  if (len > sizeof(line) - 2) len = sizeof(line) - 2;
  line[len++] = '\n';
  /* One write per line, so a message never interleaves with worker output lines. */
  ssize_t w = write(STDERR_FILENO, line, len);
  (void)w;
}

void bagua__say(const char *tool, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  bagua__vsay(tool, fmt, ap);
  va_end(ap);
}

void bagua__print_wrapped(FILE *out, const char *left, int indent, int width, const char *text) {
  /* A left part with no room after it puts the text on the next line. */
  if ((int)strlen(left) >= indent)
    fprintf(out, "%s\n%*s", left, indent, "");
  else
    fprintf(out, "%-*s", indent, left);
  int col = indent;
  int first = 1;
  for (const char *p = text; *p;) {
    while (*p == ' ') p++;
    if (!*p) break;
    int n = (int)strcspn(p, " ");
    if (!first && col + 1 + n > width) {
      fprintf(out, "\n%*s", indent, "");
      col = indent;
      first = 1;
    }
    col += fprintf(out, "%s%.*s", first ? "" : " ", n, p);
    first = 0;
    p += n;
  }
  fputc('\n', out);
}
