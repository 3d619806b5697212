# `cmake --install BUILD [--prefix P]` (docs/operations.md, "Installing"). Included at
# the end of the top-level CMakeLists.txt. Lays out:
#
#   P/bin/ckptscan, P/bin/ckptscand, P/bin/ckptscan-worker   side by side: both binaries run the
#                                                              worker found beside /proc/self/exe
#   P/share/ckptscan/rules/default_rules.textproto           the shipped rules (--rules FILE)
#   P/lib/systemd/system/ckptscand.service                   daemon/ckptscand.service, its
#                                                              /usr/local paths rewritten to P
#   SYSCONF/ckptscan/ckptscand.conf                          daemon/ckptscand.conf (SYSCONF:
#                                                              /etc for P=/usr, else P/etc)
#   P/share/doc/ckptscan/*.md, copyright                     README.md, docs/*.md, cmake/deb/copyright
#   P/share/man/man1/ckptscan.1.gz, P/share/man/man8/ckptscand.8.gz  from --help (help2man)
#   P/share/bash-completion/completions/{ckptscan,ckptscand}  bash completion, from --help
#   P/share/zsh/vendor-completions/{_ckptscan,_ckptscand}     zsh completion, from --help
#
# The prefix is taken when installing, not when configuring, so `--prefix` and DESTDIR both work
# and the unit names the binaries where they end up.
#
# Also registers the deployment tests (install layout, Dockerfile, Kubernetes manifests); their
# scripts live in tests/deploy/ (install, Docker) and tests/k8s/ (deploy/kubernetes).

install(TARGETS ckptscan ckptscand ckptscan-worker RUNTIME DESTINATION bin)
install(FILES ${CMAKE_SOURCE_DIR}/rules/default_rules.textproto
        DESTINATION share/ckptscan/rules)
install(FILES ${CMAKE_SOURCE_DIR}/README.md DESTINATION share/doc/ckptscan)
install(FILES ${CMAKE_SOURCE_DIR}/cmake/deb/copyright DESTINATION share/doc/ckptscan)

# Man pages and shell completions, made at install time from the installed binaries' own --help
# (scripts/gen_cli_docs.py with Debian's help2man: the pages cannot drift from the flags).
set(ckpt_docs_out ${CMAKE_BINARY_DIR}/install/cli_docs)
install(CODE "
  find_program(ckpt_help2man help2man)
  if(NOT ckpt_help2man)
    message(FATAL_ERROR \"help2man is not installed (apt-get install help2man, or scripts/setup.sh): \"
                        \"the man pages are made from --help at install time\")
  endif()
  execute_process(
    COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/scripts/gen_cli_docs.py
            --ckptscan $<TARGET_FILE:ckptscan> --ckptscand $<TARGET_FILE:ckptscand>
            --version ${PROJECT_VERSION} --out ${ckpt_docs_out}
    RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR \"scripts/gen_cli_docs.py failed (\${rc}): no man pages or completions\")
  endif()
")
install(FILES ${ckpt_docs_out}/man1/ckptscan.1.gz DESTINATION share/man/man1)
install(FILES ${ckpt_docs_out}/man8/ckptscand.8.gz DESTINATION share/man/man8)
install(FILES ${ckpt_docs_out}/bash-completion/ckptscan ${ckpt_docs_out}/bash-completion/ckptscand
        DESTINATION share/bash-completion/completions)
install(FILES ${ckpt_docs_out}/zsh/_ckptscan ${ckpt_docs_out}/zsh/_ckptscand
        DESTINATION share/zsh/vendor-completions)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/docs/ DESTINATION share/doc/ckptscan
        FILES_MATCHING PATTERN "*.md")

# The systemd unit and the daemon's config file, written at install time with the prefix then
# in force. The config goes to SYSCONF/ckptscan/ckptscand.conf, SYSCONF being /etc for the
# prefix /usr (the Debian package, where it is a conffile: cmake/deb/conffiles) and P/etc for
# any other; the unit's --config names it there. An existing config file is never replaced
# (a site's edits survive a reinstall; dpkg does the same for the package's conffile).
set(ckpt_unit_src ${CMAKE_SOURCE_DIR}/daemon/ckptscand.service)
set(ckpt_unit_out ${CMAKE_BINARY_DIR}/install/ckptscand.service)
set(ckpt_conf_src ${CMAKE_SOURCE_DIR}/daemon/ckptscand.conf)
install(CODE "
  set(prefix \"\${CMAKE_INSTALL_PREFIX}\")
  string(REGEX REPLACE \"/+$\" \"\" prefix \"\${prefix}\")
  if(prefix STREQUAL \"/usr\")
    set(sysconf \"/etc\")
  else()
    set(sysconf \"\${prefix}/etc\")
  endif()
  file(READ \"${ckpt_unit_src}\" unit)
  string(REPLACE \"/usr/local/etc/\" \"\${sysconf}/\" unit \"\${unit}\")
  string(REPLACE \"/usr/local/\" \"\${prefix}/\" unit \"\${unit}\")
  file(WRITE \"${ckpt_unit_out}\" \"\${unit}\")
  file(INSTALL DESTINATION \"\${CMAKE_INSTALL_PREFIX}/lib/systemd/system\" TYPE FILE
       PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
       FILES \"${ckpt_unit_out}\")
  if(EXISTS \"\$ENV{DESTDIR}\${sysconf}/ckptscan/ckptscand.conf\")
    message(STATUS \"Kept: \$ENV{DESTDIR}\${sysconf}/ckptscan/ckptscand.conf (exists)\")
  else()
    file(INSTALL DESTINATION \"\${sysconf}/ckptscan\" TYPE FILE
         PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
         FILES \"${ckpt_conf_src}\")
  endif()
")

# ---------------------------------------------------------------- deployment tests

# The install above into a fresh prefix: the layout, and the installed CLI and daemon working
# from there with the installed worker (and not the build tree's). Jailed: skipped, with the
# reason, in sanitizer builds.
add_test(NAME install_layout_test COMMAND ${CKPT_JAILED_TEST} bash
         ${CMAKE_SOURCE_DIR}/tests/deploy/install_layout_test.sh ${CMAKE_COMMAND}
         ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR})
set_tests_properties(install_layout_test PROPERTIES TIMEOUT 300)
ckpt_jailed_tests(install_layout_test)

# The Debian package (cmake/package.cmake) built with cpack from this build: metadata, files,
# the extracted binaries scanning. Jailed: skipped, with the reason, in sanitizer builds.
add_test(NAME deb_package_test COMMAND ${CKPT_JAILED_TEST} bash
         ${CMAKE_SOURCE_DIR}/tests/deploy/deb_package_test.sh ${CMAKE_CPACK_COMMAND}
         ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR})
set_tests_properties(deb_package_test PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
ckpt_jailed_tests(deb_package_test)

# The Dockerfile, statically (no image is built: docker may be absent or without a daemon).
add_test(NAME docker_files_test COMMAND /usr/bin/python3
         ${CMAKE_SOURCE_DIR}/tests/deploy/docker_files_test.py --source ${CMAKE_SOURCE_DIR}
         --ckptscand $<TARGET_FILE:ckptscand>)

# deploy/kubernetes: rendered with `kubectl kustomize` and checked against the Kubernetes
# schemas (npm kubernetes-models, `scripts/setup.sh --k8s`); 77 = skipped, reason printed.
add_test(NAME k8s_manifests_test COMMAND bash
         ${CMAKE_SOURCE_DIR}/tests/k8s/k8s_manifests_test.sh ${CMAKE_SOURCE_DIR})
set_tests_properties(k8s_manifests_test PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 120)

# deploy/kubernetes agrees with the daemon: ports, labels, probes, grace period, flags and
# config keys against `ckptscand --help`. python3-yaml; 77 = skipped, reason printed.
add_test(NAME k8s_consistency_test COMMAND /usr/bin/python3
         ${CMAKE_SOURCE_DIR}/tests/k8s/k8s_consistency_test.py --source ${CMAKE_SOURCE_DIR}
         --ckptscand $<TARGET_FILE:ckptscand>)
set_tests_properties(k8s_consistency_test PROPERTIES SKIP_RETURN_CODE 77)
