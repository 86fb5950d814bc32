/* dl.h -- libraries hurray-core loads at run time rather than links (ADR-047, ADR-073): the
 * device runtimes, OpenSSL for hurrays://, zlib for deflated .npz members. libhurray.so itself
 * needs nothing beyond libc at load time; each user of an optional library loads it once
 * (pthread_once) through hurray__dl_load / hurray__dl_load_for and remembers the first result. */
#ifndef HURRAY_CORE_DL_H
#define HURRAY_CORE_DL_H

#include <stddef.h>

#include "internal.h"

/* One symbol a loader needs: its name and where in its table of function pointers it goes
 * (offsetof). */
typedef struct HurrayDlSymbol {
  const char *name;
  size_t offset;
} HurrayDlSymbol;

/* dlopen(library) and dlsym every symbol into `table`. On failure HURRAY_EUNSUPPORTED with
 * "<needed_by> needs <library>, which could not be loaded: <the loader's message>", or
 * "<library> ... has no <symbol>"; `needed_by` names what wanted the library ("hurrays://",
 * "a deflated .npz member"). The handle is kept for the life of the process. */
HURRAY_INTERNAL int hurray__dl_load_for(const char *needed_by, const char *library,
                                        const HurrayDlSymbol *symbols, size_t count, void *table,
                                        HurrayError *error);

/* hurray__dl_load_for for a device runtime: "the device runtime <library> is not available:
 * <the loader's message>" / "the device runtime <library> has no <symbol>". */
HURRAY_INTERNAL int hurray__dl_load(const char *library, const HurrayDlSymbol *symbols,
                                    size_t count, void *table, HurrayError *error);

/* A load result remembered by a loader: the status and the message of the first attempt. */
typedef struct HurrayLoadResult {
  int status;
  HurrayError error;
} HurrayLoadResult;

/* Reports a remembered result into `error`. */
HURRAY_INTERNAL int hurray__load_result(const HurrayLoadResult *result, HurrayError *error);

#endif /* HURRAY_CORE_DL_H */
