# `cmake --install BUILD [--prefix P]` (docs/operations.md, "Installing"). Included at
# the end of the top-level CMakeLists.txt. Lays out:
#
#   P/bin/ckptscan, P/bin/ckptscand, P/bin/ckptscan-worker   side by side: both binaries run the
#                                                              worker found beside /proc/self/exe
#   P/share/ckptscan/rules/default_rules.textproto           the shipped rules (--rules FILE)
#   P/lib/systemd/system/ckptscand.service                   daemon/ckptscand.service, its
#                                                              /usr/local paths rewritten to P
#   P/share/doc/ckptscan/*.md                                README.md and docs/*.md
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
install(DIRECTORY ${CMAKE_SOURCE_DIR}/docs/ DESTINATION share/doc/ckptscan
        FILES_MATCHING PATTERN "*.md")

# The systemd unit: written at install time with the prefix then in force.
set(ckpt_unit_src ${CMAKE_SOURCE_DIR}/daemon/ckptscand.service)
set(ckpt_unit_out ${CMAKE_BINARY_DIR}/install/ckptscand.service)
install(CODE "
  set(prefix \"\${CMAKE_INSTALL_PREFIX}\")
  string(REGEX REPLACE \"/+$\" \"\" prefix \"\${prefix}\")
  file(READ \"${ckpt_unit_src}\" unit)
  string(REPLACE \"/usr/local/\" \"\${prefix}/\" unit \"\${unit}\")
  file(WRITE \"${ckpt_unit_out}\" \"\${unit}\")
  file(INSTALL DESTINATION \"\${CMAKE_INSTALL_PREFIX}/lib/systemd/system\" TYPE FILE
       PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
       FILES \"${ckpt_unit_out}\")
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
