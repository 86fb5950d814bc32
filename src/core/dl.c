/* dl.c -- loading an optional library at run time (dl.h; ADR-047, ADR-073). */
#include <dlfcn.h>
#include <string.h>

#include "dl.h"

int hurray__dl_load_for(const char *needed_by, const char *library,
                        const HurrayDlSymbol *symbols, size_t count, void *table,
                        HurrayError *error) {
  void *handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (handle == NULL) {
    const char *why = dlerror();
    if (why == NULL) why = "dlopen failed";
    if (needed_by == NULL) {
      return hurray__fail(error, HURRAY_EUNSUPPORTED, "the device runtime %s is not available: %s",
                          library, why);
    }
    return hurray__fail(error, HURRAY_EUNSUPPORTED, "%s needs %s, which could not be loaded: %s",
                        needed_by, library, why);
  }
  for (size_t i = 0; i < count; i++) {
    void *symbol = dlsym(handle, symbols[i].name);
    if (symbol == NULL) {
      dlclose(handle);
      return hurray__fail(error, HURRAY_EUNSUPPORTED, "%s%s%s has no %s",
                          needed_by == NULL ? "the device runtime " : "", library,
                          needed_by == NULL ? "" : " (found, but not the expected version)",
                          symbols[i].name);
    }
    /* A function pointer stored from dlsym's void *: the same representation on every POSIX
     * system, copied bytewise so that no object/function pointer cast is needed. */
    memcpy((char *)table + symbols[i].offset, &symbol, sizeof symbol);
  }
  return HURRAY_OK; /* the handle stays open for the life of the process */
}

int hurray__dl_load(const char *library, const HurrayDlSymbol *symbols, size_t count, void *table,
                    HurrayError *error) {
  return hurray__dl_load_for(NULL, library, symbols, count, table, error);
}

int hurray__load_result(const HurrayLoadResult *result, HurrayError *error) {
  if (result->status != HURRAY_OK && error != NULL) *error = result->error;
  return result->status;
}
