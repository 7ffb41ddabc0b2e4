# Bagua-Net tests (no GPU): included by net-plugin/CMakeLists.txt. Every pair test runs two
# processes over loopback (BAGUA_NET_IFNAME=lo) through netplugin-bench, which drives the
# plugin's table as NCCL's proxy does and checks that fds and threads return to their count
# from before init.
set(_np_bench $<TARGET_FILE:netplugin-bench>)
set(_np_lib $<TARGET_FILE:nccl-net-bagua>)
set(_np_env BAGUA_NET_IFNAME=lo)

function(bagua_np_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "ARGS;ENV" ${ARGN})
  add_test(NAME ${name} COMMAND ${_np_bench} --plugin ${_np_lib} ${T_ARGS})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  set_tests_properties(${name} PROPERTIES TIMEOUT ${T_TIMEOUT} SKIP_RETURN_CODE 77
                       ENVIRONMENT "${_np_env};${T_ENV}" LABELS netplugin)
endfunction()

# Every size from 0 B to 256 MiB, both directions at once, grouped receives, v11 table.
bagua_np_test(netplugin_check ARGS --mode check TIMEOUT 300)
# One stream and many streams; tiny chunks so that small messages are split too.
bagua_np_test(netplugin_check_1stream ARGS --mode check --max-bytes 16M ENV BAGUA_NET_NSTREAMS=1)
bagua_np_test(netplugin_check_8streams ARGS --mode check --max-bytes 16M
              ENV BAGUA_NET_NSTREAMS=8 BAGUA_NET_MIN_CHUNK_BYTES=4096)
# The compatibility tables.
foreach(v 8 9 10)
  bagua_np_test(netplugin_check_v${v} ARGS --mode check --api ${v} --max-bytes 4M)
endforeach()
# A peer SIGKILLed mid-transfer: the survivor's test() fails within 5 s, and closing the
# broken comms leaks nothing.
bagua_np_test(netplugin_kill_send ARGS --mode kill-send)
bagua_np_test(netplugin_kill_recv ARGS --mode kill-recv)
# The peer closes right after its last send: every message still arrives intact (the end of
# the control stream is not an error for messages in flight), and a later receive fails.
bagua_np_test(netplugin_close_early ARGS --mode close-early)
bagua_np_test(netplugin_latency ARGS --mode latency --max-bytes 1M)
# Refused arguments and settings.
bagua_np_test(netplugin_errors ARGS --mode errors)
bagua_np_test(netplugin_badenv_nstreams ARGS --expect-init-error 4 ENV BAGUA_NET_NSTREAMS=0)
bagua_np_test(netplugin_badenv_chunk ARGS --expect-init-error 4 ENV BAGUA_NET_MIN_CHUNK_BYTES=x)
bagua_np_test(netplugin_badenv_ifname ARGS --expect-init-error 4
              ENV BAGUA_NET_IFNAME=bagua-no-such-if0)

# NCCL_NET_PLUGIN=bagua makes NCCL dlopen("libnccl-net-bagua.so") through the library path.
add_test(NAME netplugin_by_name
         COMMAND ${_np_bench} --plugin libnccl-net-bagua.so --mode check --max-bytes 64K)
set_tests_properties(netplugin_by_name PROPERTIES TIMEOUT 60 LABELS netplugin
                     ENVIRONMENT "${_np_env};LD_LIBRARY_PATH=$<TARGET_FILE_DIR:nccl-net-bagua>")

# The .so exports exactly the four tables, and their sizes match our pinned layouts.
set(_np_sym_args)
if(BAGUA_SANITIZE OR BAGUA_FUZZ)
  set(_np_sym_args --any-size) # AddressSanitizer pads globals; the layout is still pinned
endif()
add_test(NAME netplugin_symbols
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/check_symbols.sh ${_np_lib} ${_np_sym_args})
set_tests_properties(netplugin_symbols PROPERTIES TIMEOUT 30 LABELS netplugin)
# Whether NCCL's own loader takes the plugin on this machine (skipped without libnccl.so.2).
add_executable(netplugin-nccl-probe ${CMAKE_CURRENT_LIST_DIR}/nccl_probe.c)
target_link_libraries(netplugin-nccl-probe PRIVATE ${CMAKE_DL_LIBS})
add_test(NAME netplugin_nccl_loader
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/nccl_loader.sh ${_np_lib}
                 $<TARGET_FILE:netplugin-nccl-probe>)
set_tests_properties(netplugin_nccl_loader PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77
                     LABELS netplugin)
