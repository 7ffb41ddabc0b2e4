/*
 * User-facing lines of the command-line tools (bagua-launch, bagua-agent): "TOOL: message" on
 * stderr. These are the lines a person running the tool reads (progress, refusals, the job's
 * end); diagnostics for developers go through common/log.h instead.
 *
 * Each line leaves in one write(2), so it never interleaves with the output of child processes
 * that share the terminal. The functions keep no state, take no lock and are thread-safe.
 */
#ifndef BAGUA_COMMON_OUTPUT_H
#define BAGUA_COMMON_OUTPUT_H

#include <stdarg.h>
#include <stdio.h>

/* Writes "TOOL: message\n" to stderr; with `tool` NULL the message is written as it is (for
 * lines that already name their tool). A line longer than 2 KiB is cut. */
void bagua__say(const char *tool, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void bagua__vsay(const char *tool, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

/*
 * Prints `left` padded to `indent` columns, then `text` wrapped at word boundaries so that no
 * line passes `width` columns (a word longer than the room is printed whole); continuation
 * lines start at column `indent`. Ends with a newline. For usage texts.
 */
void bagua__print_wrapped(FILE *out, const char *left, int indent, int width, const char *text);

#endif
