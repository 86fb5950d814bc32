/* status.c -- versions, status names and the error recorder. */
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

uint32_t hurray_c_abi_version(void) { return HURRAY_C_ABI_VERSION; }
uint32_t hurray_version(void) { return HURRAY_VERSION; }
const char *hurray_version_string(void) { return HURRAY_VERSION_STRING; }

const char *hurray_status_name(int status) {
  switch (status) {
#define HURRAY_X_NAME(name, value, message) \
  case value:                               \
    return "HURRAY_" #name;
    HURRAY_STATUS_LIST(HURRAY_X_NAME)
#undef HURRAY_X_NAME
    default:
      return "HURRAY_UNKNOWN_STATUS";
  }
}

const char *hurray_status_message(int status) {
  switch (status) {
#define HURRAY_X_MESSAGE(name, value, message) \
  case value:                                  \
    return message;
    HURRAY_STATUS_LIST(HURRAY_X_MESSAGE)
#undef HURRAY_X_MESSAGE
    default:
      return "unknown status";
  }
}

HURRAY_PRINTF(4, 0)
static int fail(HurrayError *error, int code, int system_errno, const char *fmt, va_list args) {
  if (error != NULL) {
    error->code = code;
    error->system_errno = system_errno;
    int n = vsnprintf(error->message, sizeof error->message, fmt, args);
    if (n < 0) snprintf(error->message, sizeof error->message, "%s", hurray_status_message(code));
    if (n >= (int)sizeof error->message) { /* cut: never inside a character */
      size_t kept = hurray__utf8_trim((const uint8_t *)error->message, sizeof error->message - 1);
      error->message[kept] = '\0';
    }
  }
  return code;
}

int hurray__fail(HurrayError *error, int code, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  fail(error, code, 0, fmt, args);
  va_end(args);
  return code;
}

int hurray__fail_errno(HurrayError *error, int code, int system_errno, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  fail(error, code, system_errno, fmt, args);
  va_end(args);
  return code;
}
