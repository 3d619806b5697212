// Where ckptscand listens and keeps its state when not told otherwise; `ckptscan --server local`
// finds the daemon the same way. Root gets system paths, anyone else paths of their own (XDG
// base directories), so that `ckptscand` with no flags runs on a laptop as is.
#ifndef CKPTSCAN_APP_PATHS_H_
#define CKPTSCAN_APP_PATHS_H_

#include <unistd.h>

#include <cstdlib>
#include <string>

namespace ckptscan::app {

inline std::string DefaultSocketPath() {
  if (::geteuid() == 0) return "/run/ckptscan/ckptscand.sock";
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  if (runtime != nullptr && runtime[0] == '/') {
    return std::string(runtime) + "/ckptscan/ckptscand.sock";
  }
  return "/tmp/ckptscan-" + std::to_string(::geteuid()) + "/ckptscand.sock";
}

inline std::string DefaultStateDir() {
  if (::geteuid() == 0) return "/var/lib/ckptscan";
  const char* state = std::getenv("XDG_STATE_HOME");
  if (state != nullptr && state[0] == '/') return std::string(state) + "/ckptscan";
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr && home[0] == '/' ? home : "/tmp") + "/.local/state/ckptscan";
}

}  // namespace ckptscan::app

#endif  // CKPTSCAN_APP_PATHS_H_
