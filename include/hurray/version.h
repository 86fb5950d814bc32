/* hurray/version.h -- the library's release version (not the ABI version: see hurray.h). */
#ifndef HURRAY_VERSION_H
#define HURRAY_VERSION_H

#define HURRAY_VERSION_MAJOR 0
#define HURRAY_VERSION_MINOR 1
#define HURRAY_VERSION_PATCH 0
#define HURRAY_VERSION_STRING "0.1.0"
#define HURRAY_VERSION \
  ((HURRAY_VERSION_MAJOR << 16) | (HURRAY_VERSION_MINOR << 8) | HURRAY_VERSION_PATCH)

#endif /* HURRAY_VERSION_H */
