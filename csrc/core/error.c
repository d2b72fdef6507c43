/* Thread-local error messages: the core's only way to report what went wrong. */
#include <stdarg.h>
#include <stdio.h>

#include "manaka.h"

static _Thread_local char last_error[1024];

mk_status mk_fail(mk_status status, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, args);
    va_end(args);
    return status;
}

const char *mk_error(void) { return last_error; }
