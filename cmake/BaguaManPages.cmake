# Man pages bagua-launch(1) and bagua-agent(1), written at build time by help2man from the
# tools' own --help and --version. --help is printed from the settings tables that also parse
# the flags (launcher/settings.c, agent/cli.c), so the pages cannot drift from the options the
# way a hand-written copy would.
#
# BAGUA_MAN_PAGES: AUTO writes them when help2man is installed and says so when it is not, ON
# requires help2man (the Debian package build), OFF never looks.
set(BAGUA_MAN_PAGES AUTO CACHE STRING "Write the tools' man pages with help2man: AUTO, ON or OFF")
set_property(CACHE BAGUA_MAN_PAGES PROPERTY STRINGS AUTO ON OFF)
if(NOT BAGUA_MAN_PAGES MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "BAGUA_MAN_PAGES is \"${BAGUA_MAN_PAGES}\"; accepted: AUTO, ON or OFF")
endif()
if(BAGUA_MAN_PAGES STREQUAL "OFF")
  return()
endif()

# help2man runs the tools, so a build whose tools cannot run here has no pages: a cross build,
# and the sanitizer builds, where a leak report at exit would fail the build. Those builds are
# for testing, never installed.
set(_bagua_man_skip "")
if(CMAKE_CROSSCOMPILING)
  set(_bagua_man_skip "cross-compiled tools cannot run on the build machine")
elseif(BAGUA_SANITIZE OR BAGUA_TSAN OR BAGUA_FUZZ)
  set(_bagua_man_skip "not written in sanitizer and fuzz builds")
else()
  find_program(BAGUA_HELP2MAN help2man
               DOC "help2man, which writes the man pages from the tools' --help")
  if(NOT BAGUA_HELP2MAN)
    set(_bagua_man_skip "help2man not found (apt-get install help2man)")
  endif()
endif()
if(_bagua_man_skip)
  if(BAGUA_MAN_PAGES STREQUAL "ON")
    message(FATAL_ERROR "BAGUA_MAN_PAGES=ON but the man pages cannot be written: "
                        "${_bagua_man_skip}")
  endif()
  message(STATUS "man pages: skipped, ${_bagua_man_skip}")
  return()
endif()

set(_bagua_man_dir ${PROJECT_BINARY_DIR}/man)
file(MAKE_DIRECTORY ${_bagua_man_dir})
set(_bagua_man_pages "")
# TOOL then its one-line NAME description, for each tool.
foreach(_pair "bagua-launch|start and supervise a Bagua-C training job"
              "bagua-agent|per-node agent of a Bagua-C job: rendezvous and worker supervision")
  string(REPLACE "|" ";" _pair "${_pair}")
  list(GET _pair 0 _tool)
  list(GET _pair 1 _name)
  set(_page ${_bagua_man_dir}/${_tool}.1)
  # What help2man runs: the tool, with its usage lines put in the shape help2man reads.
  set(_run ${_bagua_man_dir}/${_tool}.help2man)
  file(GENERATE OUTPUT ${_run}
       CONTENT "#!/bin/sh\nexec /bin/sh '${CMAKE_CURRENT_LIST_DIR}/help2man-usage.sh' '$<TARGET_FILE:${_tool}>' \"$@\"\n"
       FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
                        WORLD_READ WORLD_EXECUTE)
  # Written under a temporary name and renamed, so that a tool that fails leaves no page that
  # the next build would take for up to date. help2man dates the page from SOURCE_DATE_EPOCH
  # when it is set (dpkg-buildpackage sets it), which keeps package builds reproducible.
  add_custom_command(
    OUTPUT ${_page}
    COMMAND ${BAGUA_HELP2MAN} --no-info --section=1 "--name=${_name}"
            --output=${_page}.tmp ${_run}
    COMMAND ${CMAKE_COMMAND} -E rename ${_page}.tmp ${_page}
    DEPENDS ${_tool} ${_run} ${CMAKE_CURRENT_LIST_DIR}/help2man-usage.sh
    COMMENT "Writing ${_tool}(1) from ${_tool} --help"
    VERBATIM)
  list(APPEND _bagua_man_pages ${_page})
endforeach()
add_custom_target(bagua_man_pages ALL DEPENDS ${_bagua_man_pages})
install(FILES ${_bagua_man_pages} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT tools)
message(STATUS "man pages: bagua-launch(1) and bagua-agent(1) with ${BAGUA_HELP2MAN}")
