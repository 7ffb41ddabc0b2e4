# The argument and signature contract of the collectives (tests/comm/test_coll_contract.c):
# mismatched calls refused on every rank of every transport, invalid roots refused, argument
# errors that one rank alone sees refused on every rank (the communicator staying in phase), and
# a seeded property test of random calls with random per-rank mismatches and refusals. Included from
# tests/comm/CMakeLists.txt; bagua_mp_test and bagua_test_mp come from tests/CMakeLists.txt.
add_executable(test_coll_contract test_coll_contract.c)
target_link_libraries(test_coll_contract PRIVATE bagua_test_mp)
# shm (one round and many rounds per call), tcp with emulated nodes (several streams) and
# on one host, and the hierarchical mix (two and three emulated nodes).
foreach(mode mismatch roots refuse)
  foreach(cfg "shm;2" "shm;4" "tcp;3;1" "tcp;2" "auto;4;2")
    string(REGEX REPLACE "[;=]" "_" tag "${cfg}")
    bagua_mp_test(comm_contract_${mode}_${tag} EXE test_coll_contract ARGS ${mode} ${cfg}
                  TIMEOUT 60)
  endforeach()
endforeach()
foreach(cfg "shm;3;0;BAGUA_SHM_SLOT_BYTES=8192" "shm;4" "tcp;3;1" "auto;5;2")
  string(REGEX REPLACE "[;=]" "_" tag "${cfg}")
  string(REPLACE "BAGUA_" "" tag "${tag}")
  bagua_mp_test(coll_property_${tag} EXE test_coll_contract ARGS property ${cfg} TIMEOUT 60)
endforeach()
# Nine ranks: the TCP signature exchange's Bruck rounds with a partial last round.
bagua_mp_test(comm_contract_mismatch_tcp_9 EXE test_coll_contract ARGS mismatch tcp 9 TIMEOUT 60)
# Eight ranks, one per emulated node: the recursive-doubling agreement a small allreduce rides
# in (comm/sig.c), against calls that ride differently or not at all, and random calls.
bagua_mp_test(comm_contract_mismatch_tcp_8_1 EXE test_coll_contract ARGS mismatch tcp 8 1
              TIMEOUT 90)
bagua_mp_test(coll_property_tcp_8_1 EXE test_coll_contract ARGS property tcp 8 1 TIMEOUT 90)
