# FindCUDNN: cuDNN headers and library from the CUDA toolkit or CUDNN_ROOT. Provides CUDNN::cudnn,
# CUDNN_FOUND, CUDNN_VERSION (from cudnn_version.h).
find_path(CUDNN_INCLUDE_DIR cudnn_version.h
  HINTS ${CUDNN_ROOT} $ENV{CUDNN_ROOT} ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda
  PATH_SUFFIXES include)
find_library(CUDNN_LIBRARY cudnn
  HINTS ${CUDNN_ROOT} $ENV{CUDNN_ROOT} ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda
  PATH_SUFFIXES lib64 lib)
if(CUDNN_INCLUDE_DIR AND EXISTS "${CUDNN_INCLUDE_DIR}/cudnn_version.h")
  file(STRINGS "${CUDNN_INCLUDE_DIR}/cudnn_version.h" _ft_cudnn_defs REGEX "#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ")
  foreach(part MAJOR MINOR PATCHLEVEL)
    string(REGEX MATCH "CUDNN_${part} ([0-9]+)" _m "${_ft_cudnn_defs}")
    set(_ft_cudnn_${part} "${CMAKE_MATCH_1}")
  endforeach()
  set(CUDNN_VERSION "${_ft_cudnn_MAJOR}.${_ft_cudnn_MINOR}.${_ft_cudnn_PATCHLEVEL}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUDNN REQUIRED_VARS CUDNN_LIBRARY CUDNN_INCLUDE_DIR VERSION_VAR CUDNN_VERSION)
if(CUDNN_FOUND AND NOT TARGET CUDNN::cudnn)
  add_library(CUDNN::cudnn UNKNOWN IMPORTED)
  set_target_properties(CUDNN::cudnn PROPERTIES IMPORTED_LOCATION "${CUDNN_LIBRARY}"
                                               INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_INCLUDE_DIR}")
endif()
mark_as_advanced(CUDNN_INCLUDE_DIR CUDNN_LIBRARY)
