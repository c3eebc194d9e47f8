# The Debian package (`cpack -G DEB` in the build folder): distrun, distrun-worker, libdistrun
# with its headers and CMake config, man pages made from --help by help2man, bash completion.

find_program(DISTRUN_HELP2MAN help2man)
if(DISTRUN_SANITIZE)
  # Packages come from plain builds; a sanitizer's report at exit would fail help2man.
  message(STATUS "sanitized build: no man pages")
elseif(DISTRUN_HELP2MAN)
  set(man_pages)
  set(summary_distrun "start and supervise the ranks of a distributed job, torchrun-style")
  set(summary_distrun-worker "run one rank of a distrun scenario")
  set(summary_distrun-bench "time collectives over a range of sizes, as nccl-tests do, on every rank of a job")
  foreach(prog distrun distrun-worker distrun-bench)
    set(page ${CMAKE_BINARY_DIR}/man/${prog}.1.gz)
    add_custom_command(OUTPUT ${page}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/man
      COMMAND ${DISTRUN_HELP2MAN} --no-info --no-discard-stderr --version-string=${PROJECT_VERSION}
              "--name=${summary_${prog}}" --output=${CMAKE_BINARY_DIR}/man/${prog}.1 $<TARGET_FILE:${prog}>
      COMMAND gzip -9nf ${CMAKE_BINARY_DIR}/man/${prog}.1
      DEPENDS ${prog}
      COMMENT "man page of ${prog} from its --help")
    list(APPEND man_pages ${page})
  endforeach()
  add_custom_target(man_pages ALL DEPENDS ${man_pages})
  install(FILES ${man_pages} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
else()
  message(STATUS "help2man not found: no man pages (scripts/deps.sh build installs it)")
endif()

install(FILES ${PROJECT_SOURCE_DIR}/packaging/distrun.bash-completion
  DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions RENAME distrun)
install(CODE "file(CREATE_LINK distrun \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_DATADIR}/bash-completion/completions/distrun-worker\" SYMBOLIC)")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME distrun)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "distrun maintainers <distrun@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "torchrun-style launcher and collective scenario runner (Gloo, NCCL)")
set(CPACK_PACKAGE_DESCRIPTION "distrun starts and supervises the ranks of a distributed job as torchrun does, \
and runs YAML collective scenarios with distrun-worker over Gloo or NCCL. Includes libdistrun, its headers \
and CMake package (find_package(distrun)).")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)  # Depends: from the libraries the binaries link (dpkg-shlibdeps)
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "python3-torch, openmpi-bin, slurm-wlm")
include(CPack)
