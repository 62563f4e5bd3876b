# KEEL_HAVE_CUDA: whether the `cuda` backend is built. It is when a CUDA compiler (nvcc) is found;
# otherwise the build goes on without it and says so. Architectures default to sm_80 (A100) and
# sm_90 (H100/H200): the two the plugin is written for; a user may still set
# -DCMAKE_CUDA_ARCHITECTURES on the command line, and -DKEEL_BUILD_CUDA=OFF skips it (nvcc is slow).
option(KEEL_BUILD_CUDA "Build the cuda backend when a CUDA compiler is found" ON)
set(KEEL_HAVE_CUDA OFF)
if(NOT KEEL_BUILD_CUDA)
  message(STATUS "Keel: KEEL_BUILD_CUDA is OFF; the cuda backend is not built")
  return()
endif()
include(CheckLanguage)
check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES "80;90" CACHE STRING "GPU architectures of the cuda backend")
  endif()
  enable_language(CUDA)  # here, at the top: the kernels and the plugin both link CUDA code
  find_package(CUDAToolkit)
  if(CUDAToolkit_FOUND)
    set(KEEL_HAVE_CUDA ON)
  else()
    message(STATUS "Keel: nvcc found but not the CUDA toolkit's libraries; the cuda backend is not built")
  endif()
else()
  message(STATUS "Keel: no CUDA compiler found; the cuda backend is not built")
endif()
