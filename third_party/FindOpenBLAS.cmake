# Finds Debian's OpenBLAS (libopenblas-dev) and defines the imported target OpenBLAS::OpenBLAS.
find_path(OpenBLAS_INCLUDE_DIR NAMES cblas.h PATH_SUFFIXES openblas openblas-pthread)
find_library(OpenBLAS_LIBRARY NAMES openblas)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(OpenBLAS REQUIRED_VARS OpenBLAS_LIBRARY OpenBLAS_INCLUDE_DIR)
if(OpenBLAS_FOUND AND NOT TARGET OpenBLAS::OpenBLAS)
  add_library(OpenBLAS::OpenBLAS UNKNOWN IMPORTED)
  set_target_properties(OpenBLAS::OpenBLAS PROPERTIES
    IMPORTED_LOCATION "${OpenBLAS_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${OpenBLAS_INCLUDE_DIR}")
endif()
