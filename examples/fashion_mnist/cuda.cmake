# fashion_mnist --device cuda: the GPU model, data and training loop, and their tests.
# Included by examples/CMakeLists.txt once fashion_mnist_core and fashion_mnist exist (an
# include, not a subdirectory: the executable is build/examples/fashion_mnist, a path that a
# build folder of the same name would take). The GPU code needs libbagua's CUDA mode of the
# data-parallel layer, so it is built only where the library has both CUDA and NCCL; anywhere
# else `--device cuda` is rejected on the command line with exit status 2.

if(BAGUA_BUILD_TESTS)
  # The top level enables testing after this directory is processed; enabling it here as well
  # is what makes ctest see the tests registered below.
  enable_testing()
  # Every build: --device accepts cpu or cuda, and cuda either runs or says why it cannot.
  add_test(NAME example_fm_device_flag COMMAND fashion_mnist --device tpu)
  set_tests_properties(example_fm_device_flag PROPERTIES
    PASS_REGULAR_EXPRESSION "--device: \"tpu\" is not accepted; expected cpu or cuda"
    TIMEOUT 30 LABELS example)
  if(NOT (BAGUA_HAVE_CUDA AND BAGUA_HAVE_NCCL))
    add_test(NAME example_fm_device_cuda_unsupported COMMAND fashion_mnist --device cuda)
    set_tests_properties(example_fm_device_cuda_unsupported PROPERTIES
      PASS_REGULAR_EXPRESSION "--device cuda: this build has no CUDA/NCCL support"
      TIMEOUT 30 LABELS example)
  endif()
endif()

if(NOT (BAGUA_HAVE_CUDA AND BAGUA_HAVE_NCCL))
  message(STATUS "examples/fashion_mnist: --device cuda not built (needs libbagua with CUDA and NCCL)")
  return()
endif()
if(NOT TARGET CUDA::cublas)
  message(STATUS "examples/fashion_mnist: --device cuda not built (the CUDA toolkit has no cuBLAS)")
  return()
endif()

# The .cu files. The directory's compile options are GCC's (-Wall, -Werror, sanitizers), which
# nvcc rejects, so this target starts from none, as kernels/cuda does. --fmad=false and IEEE
# division keep the element-wise kernels' arithmetic equal to mlp.c's (the products, through
# cuBLAS, still round differently; the GPU-versus-CPU test allows for that).
add_library(fashion_mnist_cuda STATIC
  fashion_mnist/fm_cuda.cu
  fashion_mnist/mlp_cuda.cu
  fashion_mnist/data_cuda.cu)
set_property(TARGET fashion_mnist_cuda PROPERTY COMPILE_OPTIONS "")
target_compile_options(fashion_mnist_cuda PRIVATE
  --fmad=false --prec-div=true --prec-sqrt=true --ftz=false
  -lineinfo
  "-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter,-fno-exceptions,-fno-threadsafe-statics"
  --Werror=cross-execution-space-call)
set_target_properties(fashion_mnist_cuda PROPERTIES
  CUDA_STANDARD 17
  CUDA_STANDARD_REQUIRED ON
  POSITION_INDEPENDENT_CODE ON
  CUDA_RUNTIME_LIBRARY Shared)
target_include_directories(fashion_mnist_cuda PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/fashion_mnist)
# cuBLAS ships with every CUDA toolkit; its SGEMM is far faster than a hand-written one.
target_link_libraries(fashion_mnist_cuda PUBLIC CUDA::cudart CUDA::cublas)

# The GPU gather reproduces fm_dataset_gather's normalisation bit for bit (a product, then a
# sum); a host compiler allowed to fuse them into one multiply-add (-march with FMA) would break
# that equality, which test_fm_gpu_mlp checks.
set_source_files_properties(fashion_mnist/dataset.c PROPERTIES COMPILE_OPTIONS -ffp-contract=off)

# The C side (the training loop) stays in the core library with the project's warnings;
# FM_HAVE_CUDA lets cli.c accept --device cuda and main.c call the GPU loop.
target_sources(fashion_mnist_core PRIVATE fashion_mnist/train_cuda.c)
target_compile_definitions(fashion_mnist_core PUBLIC FM_HAVE_CUDA=1)
target_link_libraries(fashion_mnist_core PUBLIC fashion_mnist_cuda)

if(NOT BAGUA_BUILD_TESTS)
  return()
endif()

# GPU tests, label `gpu`: each exits 77 ("SKIP: no CUDA device ...", ctest: skipped) where no
# device is usable. test_fm_gpu_mlp compares one forward/backward pass of the CUDA model with
# mlp.c's on the same weights and batch; test_fm_gpu_run trains with `--device cuda` on one
# rank, and on two processes sharing the GPU (distinct NCCL_HOSTIDs) with every algorithm.
add_executable(test_fm_gpu_mlp fashion_mnist/gpu_test/test_fm_gpu_mlp.c)
target_include_directories(test_fm_gpu_mlp PRIVATE ${PROJECT_SOURCE_DIR}/tests)
target_link_libraries(test_fm_gpu_mlp PRIVATE fashion_mnist_core m)
add_test(NAME example_fm_gpu_mlp COMMAND test_fm_gpu_mlp)
set_tests_properties(example_fm_gpu_mlp PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77 LABELS gpu)

add_executable(test_fm_gpu_run fashion_mnist/gpu_test/test_fm_gpu_run.c
                               ${PROJECT_SOURCE_DIR}/tests/examples/fm_child.c)
target_include_directories(test_fm_gpu_run PRIVATE ${PROJECT_SOURCE_DIR}/tests)
# fm_child.c picks its rendezvous ports with libbagua's bagua__sock_spare_port.
target_link_libraries(test_fm_gpu_run PRIVATE bagua_static)
set(_fm_gpu_tests example_fm_gpu_mlp)
foreach(cfg "1;gradient_allreduce" "2;gradient_allreduce" "2;bytegrad" "2;decentralized"
            "2;low_precision_decentralized" "2;qadam" "2;async")
  string(REPLACE ";" "_" tag "${cfg}")
  add_test(NAME example_fm_gpu_run_${tag} COMMAND test_fm_gpu_run $<TARGET_FILE:fashion_mnist> ${cfg})
  set_tests_properties(example_fm_gpu_run_${tag} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                                                            LABELS gpu RUN_SERIAL TRUE)
  list(APPEND _fm_gpu_tests example_fm_gpu_run_${tag})
endforeach()

# As tests/gpu does: the CUDA driver needs the address range ASan reserves, and keeps its
# allocations until exit.
if(BAGUA_SANITIZE)
  set_tests_properties(${_fm_gpu_tests} PROPERTIES ENVIRONMENT_MODIFICATION
                       "ASAN_OPTIONS=string_append::protect_shadow_gap=0:detect_leaks=0")
endif()
