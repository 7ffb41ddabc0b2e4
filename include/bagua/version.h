/*
 * The library's version: the one place it is written. CMakeLists.txt reads these three
 * numbers for project(VERSION), the shared library's SONAME and the tools' --version.
 */
#ifndef BAGUA_VERSION_H
#define BAGUA_VERSION_H

#define BAGUA_VERSION_MAJOR 0
#define BAGUA_VERSION_MINOR 1
#define BAGUA_VERSION_PATCH 0

#define BAGUA__STR2(x) #x
#define BAGUA__STR(x) BAGUA__STR2(x)
/* "MAJOR.MINOR.PATCH", e.g. "0.1.0". */
#define BAGUA_VERSION_STRING      \
  BAGUA__STR(BAGUA_VERSION_MAJOR) \
  "." BAGUA__STR(BAGUA_VERSION_MINOR) "." BAGUA__STR(BAGUA_VERSION_PATCH)

#endif
