# A Debian package of what cmake/install.cmake installs: `cpack -G DEB` in the build directory
# (or `cmake --build BUILD --target package`) writes ckptscan_<version>_<arch>.deb with
#   /usr/bin/ckptscan, /usr/bin/ckptscand, /usr/bin/ckptscan-worker (side by side),
#   /usr/share/ckptscan/rules/, /usr/share/doc/ckptscan/, /usr/lib/systemd/system/ckptscand.service
# Its Depends are computed from the binaries by dpkg-shlibdeps (dpkg-dev); postinst creates the
# daemon's system user and group. The service is installed, not enabled. Checked by
# tests/deploy/deb_package_test.sh (the package's metadata and files, the extracted binaries
# scanning) and, on a fresh Debian 12 root, by scripts/fresh_root_check.sh --package DEB.
set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_NAME "ckptscan")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
set(CPACK_PACKAGE_CONTACT "ckptscan maintainers <ckptscan@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "checkpoint scanner for PyTorch, pickle, numpy, safetensors, GGUF, ONNX and Keras files")
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
    "ckptscan reads model files exactly as their loaders would, in a seccomp-jailed worker,\n\
and decides SAFE only by an exact-name allowlist. Includes the CLI (ckptscan), the gRPC\n\
daemon for model hubs (ckptscand, with a hardened systemd unit) and the jailed worker.")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION "utils")
set(CPACK_DEBIAN_PACKAGE_PRIORITY "optional")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# Without debug info (a RelWithDebInfo build carries ~60 MB of it).
set(CPACK_STRIP_FILES ON)
# postinst's groupadd/useradd (passwd) and getent (libc-bin) are Essential or required in Debian.
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    "${CMAKE_SOURCE_DIR}/cmake/deb/postinst;${CMAKE_SOURCE_DIR}/cmake/deb/postrm;${CMAKE_SOURCE_DIR}/cmake/deb/conffiles")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
