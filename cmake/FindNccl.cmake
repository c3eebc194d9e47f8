# Finds CUDA and NCCL (in /usr/local/cuda by default) for the optional NCCL backend.
# Sets DISTRUN_HAVE_NCCL (ON/OFF) and, when found, the imported target distrun::nccl (headers and
# library, for the tests that call NCCL themselves) and DISTRUN_CUDA_LIBRARY_DIRS.
set(DISTRUN_HAVE_NCCL OFF)
set(DISTRUN_NCCL_REASON "")
if(NOT DISTRUN_WITH_NCCL STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
  if(CUDAToolkit_FOUND AND NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    set(DISTRUN_HAVE_NCCL ON)
    add_library(distrun::nccl UNKNOWN IMPORTED)
    set_target_properties(distrun::nccl PROPERTIES
      IMPORTED_LOCATION ${NCCL_LIBRARY}
      INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})
    set(DISTRUN_NCCL_REASON "(${NCCL_LIBRARY}, CUDA ${CUDAToolkit_VERSION})")
    # Where libdistrun looks for them at run time when the system's loader does not know them.
    get_filename_component(nccl_dir ${NCCL_LIBRARY} DIRECTORY)
    set(DISTRUN_CUDA_LIBRARY_DIRS ${CUDAToolkit_LIBRARY_DIR} ${nccl_dir})
    list(REMOVE_DUPLICATES DISTRUN_CUDA_LIBRARY_DIRS)
  else()
    set(DISTRUN_NCCL_REASON "(CUDA toolkit or NCCL not found)")
    if(DISTRUN_WITH_NCCL STREQUAL "ON")
      message(FATAL_ERROR "DISTRUN_WITH_NCCL=ON but CUDA/NCCL was not found")
    endif()
  endif()
else()
  set(DISTRUN_NCCL_REASON "(disabled)")
endif()
