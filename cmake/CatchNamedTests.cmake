# One ctest test per Catch2 test case, named AREA.SUBJECT.CASE: SUBJECT is the file the case is
# written in (test_store.cpp, store_test.cpp -> store), CASE the case's own name in lower case,
# each run of characters other than letters and digits made one '_' ("TCPStore: the job secret
# is required" -> tcpstore_the_job_secret_is_required). So every test follows the suite's
# <area>.<subject>.<case> scheme and points at its file, while the C++ keeps readable names.
# Catch2's catch_discover_tests names tests after the case verbatim; this is its discovery
# (a post-build step listing the cases) with that naming.
#
# Included by tests/CMakeLists.txt: distrun_catch_tests(TARGET AREA [LABELS l...] [TIMEOUT s]
#   [ENVIRONMENT e...]). Run by that post-build step with cmake -P.

if(NOT CMAKE_SCRIPT_MODE_FILE)
  set(_DISTRUN_CATCH_NAMED_SCRIPT ${CMAKE_CURRENT_LIST_FILE})
  function(distrun_catch_tests target area)
    cmake_parse_arguments(arg "" "TIMEOUT" "LABELS;ENVIRONMENT" ${ARGN})
    if(NOT arg_LABELS)
      set(arg_LABELS ${area} stage.unit)
    endif()
    if(NOT arg_TIMEOUT)
      set(arg_TIMEOUT 300)
    endif()
    list(JOIN arg_LABELS "," labels)
    list(JOIN arg_ENVIRONMENT "," environment)
    set(tests_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_named_tests.cmake")
    add_custom_command(TARGET ${target} POST_BUILD BYPRODUCTS "${tests_file}"
      COMMAND "${CMAKE_COMMAND}" -D "EXECUTABLE=$<TARGET_FILE:${target}>" -D "AREA=${area}"
              -D "LABELS=${labels}" -D "TIMEOUT=${arg_TIMEOUT}" -D "ENVIRONMENT=${environment}"
              -D "WORKING_DIR=${CMAKE_CURRENT_BINARY_DIR}" -D "OUT=${tests_file}"
              -P "${_DISTRUN_CATCH_NAMED_SCRIPT}"
      VERBATIM)
    set(include_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_named_include.cmake")
    file(WRITE "${include_file}"
      "if(EXISTS \"${tests_file}\")\n  include(\"${tests_file}\")\n"
      "else()\n  add_test(${area}.${target}.not_built ${target}_NOT_BUILT)\nendif()\n")
    set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${include_file}")
  endfunction()
  return()
endif()

cmake_minimum_required(VERSION 3.16)  # script mode starts with old policies (IN_LIST)
execute_process(COMMAND "${EXECUTABLE}" --list-test-names-only
  OUTPUT_VARIABLE listing RESULT_VARIABLE result WORKING_DIRECTORY "${WORKING_DIR}")
if(result LESS 0 OR listing STREQUAL "")
  message(FATAL_ERROR "${EXECUTABLE} --list-test-names-only failed (${result}): ${listing}")
endif()
string(REGEX REPLACE "\n$" "" listing "${listing}")
# A case's name may hold ';', CMake's list separator: it travels as @SEMICOLON@.
string(REPLACE ";" "@SEMICOLON@" listing "${listing}")
string(REPLACE "\n" ";" cases "${listing}")
# The verbose listing gives each case's file:line, in the same order (its names may wrap).
execute_process(COMMAND "${EXECUTABLE}" --list-tests --verbosity high
  OUTPUT_VARIABLE verbose WORKING_DIRECTORY "${WORKING_DIR}")
string(REGEX MATCHALL "[^ \n]+\\.cpp:[0-9]+\n" files "${verbose}")
list(LENGTH cases ncases)
list(LENGTH files nfiles)
if(NOT ncases EQUAL nfiles)
  message(FATAL_ERROR "${EXECUTABLE}: ${ncases} test cases but ${nfiles} source locations listed")
endif()
string(REPLACE "," ";" labels "${LABELS}")
string(REPLACE "," ";" environment "${ENVIRONMENT}")
set(script "")
set(seen "")
foreach(index RANGE 1 ${ncases})
  math(EXPR index "${index} - 1")
  list(GET cases ${index} case)
  string(REPLACE "@SEMICOLON@" ";" case "${case}")
  # Catch2 2.13's console reporter prints a failing case's name wrapped at 79 columns, the lines
  # after the first indented to just past its first ": ". From column 77 on that leaves no room:
  # it writes the name's last words over and over without end (gigabytes a minute), throws out
  # of the reporter, or drops the name's end (Debian's catch2 2.13.10). So such a name is refused.
  string(FIND "${case}" ": " colon)
  if(colon GREATER_EQUAL 76)
    math(EXPR column "${colon} + 1")
    message(FATAL_ERROR "${EXECUTABLE}: the test case \"${case}\" has its first ': ' at column ${column}; "
      "Catch2's console reporter prints such a name without end when the case fails. Put the ': ' before "
      "column 77, or write the name without it.")
  endif()
  list(GET files ${index} file)
  string(REGEX REPLACE ":[0-9]+\n$" "" file "${file}")
  get_filename_component(subject "${file}" NAME_WE)
  string(REGEX REPLACE "^test_|_test$" "" subject "${subject}")
  string(TOLOWER "${case}" slug)
  string(REGEX REPLACE "[^a-z0-9]+" "_" slug "${slug}")
  string(REGEX REPLACE "^_|_$" "" slug "${slug}")
  set(name "${AREA}.${subject}.${slug}")
  if(name IN_LIST seen)
    message(FATAL_ERROR "${EXECUTABLE}: two test cases make the ctest name ${name}; rename one")
  endif()
  list(APPEND seen "${name}")
  # Catch2 reads ',' '[' ']' in a test spec as syntax: escape them to select the case by name.
  string(REGEX REPLACE "([],[])" "\\\\\\1" spec "${case}")
  string(APPEND script "add_test([==[${name}]==] [==[${EXECUTABLE}]==] [==[${spec}]==])\n"
    "set_tests_properties([==[${name}]==] PROPERTIES WORKING_DIRECTORY [==[${WORKING_DIR}]==]"
    " TIMEOUT ${TIMEOUT} LABELS [==[${labels}]==]")
  if(environment)
    string(APPEND script " ENVIRONMENT [==[${environment}]==]")
  endif()
  string(APPEND script ")\n")
endforeach()
file(WRITE "${OUT}" "${script}")
