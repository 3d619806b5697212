// pickle_facts: prints what the VM saw in each file, one JSON object per line, for the
// differential test against CPython (tests/differential/diff_test.py).
//
//   pickle_facts [--joblib|--python|--read-file] FILE...   or   ... --stdin
//
// --joblib reads the files as joblib.load does (pickle::Loader::kJoblib), --python as
// pickle._Unpickler does (pickle::Loader::kPython), instead of as pickle.load does. --read-file reads each file as the scanner does (formats::ReadFile: format
// detection, joblib's compressed files decompressed, every reading): "pickles" are those of
// every member (each with its "member"), "stream_error" the first error of the file (or of a
// member's stream, or an alternative reading that stopped where its loader reads on). A pickle's
// "error_code" is "malformed", "limit", "unsupported" or "stricter" (pickle::VmError::Code), or
// null.
//
// {"file": ..., "pickles": [{"start", "end", "depth", "error", "error_offset",
//   "globals": [[module, name], ...]}], "trailing_bytes": N, "stream_error": null|"..."}
// Globals are raw (as find_class receives them); EXT references are ["<ext>", "<code>"].
// Top-level pickles come first in stream order, nested ones after.
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

#include "core/formats/read_file.h"
#include "core/pickle/vm.h"
#include "nlohmann/json.hpp"

namespace {

using ckptscan::pickle::GlobalRef;
using ckptscan::pickle::PickleFacts;
using ckptscan::pickle::StreamFacts;
using ckptscan::pickle::Via;
using ckptscan::pickle::Vm;

// Names are arbitrary bytes (lone surrogates are kept as 3-byte sequences); invalid UTF-8 is
// printed as U+FFFD, and the differential test normalises CPython's side the same way.
std::string Dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

const char* CodeName(ckptscan::pickle::VmError::Code c) {
  switch (c) {
    case ckptscan::pickle::VmError::Code::kMalformed:
      return "malformed";
    case ckptscan::pickle::VmError::Code::kLimit:
      return "limit";
    case ckptscan::pickle::VmError::Code::kUnsupported:
      return "unsupported";
    case ckptscan::pickle::VmError::Code::kStricter:
      return "stricter";
  }
  return "?";
}

nlohmann::json Pickles(const StreamFacts& facts, const std::string& member) {
  nlohmann::json pickles = nlohmann::json::array();
  for (const PickleFacts& p : facts.pickles) {
    nlohmann::json jp;
    jp["member"] = member;
    jp["start"] = p.start;
    jp["end"] = p.end;
    jp["depth"] = p.depth;
    jp["error"] = p.error ? nlohmann::json(p.error->message) : nlohmann::json(nullptr);
    jp["error_offset"] = p.error ? nlohmann::json(p.error->offset) : nlohmann::json(nullptr);
    jp["error_code"] = p.error ? nlohmann::json(CodeName(p.error->code)) : nlohmann::json(nullptr);
    nlohmann::json globals = nlohmann::json::array();
    for (const GlobalRef& g : p.graph.globals) {
      if (g.via == Via::kExt) {
        globals.push_back({"<ext>", std::to_string(g.ext_code)});
      } else if (g.via == Via::kDynamic) {
        globals.push_back({"<computed>", g.module_computed ? "?" : g.module});
      } else {
        globals.push_back({g.module, g.name});
      }
    }
    jp["globals"] = std::move(globals);
    pickles.push_back(std::move(jp));
  }
  return pickles;
}

// The whole file as the scanner reads it.
nlohmann::json DescribeFile(const std::string& path, const Vm& vm) {
  nlohmann::json out;
  out["file"] = path;
  out["pickles"] = nlohmann::json::array();
  out["trailing_bytes"] = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    out["stream_error"] = "cannot open";
    return out;
  }
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const ckptscan::torch::FileFacts f = ckptscan::formats::ReadFile(data, vm);
  out["format"] = f.format;
  nlohmann::json error = nullptr;
  if (!f.errors.empty()) error = f.errors[0].message();
  for (const ckptscan::torch::MemberFacts& m : f.members) {
    for (nlohmann::json& p : Pickles(m.stream, m.member)) out["pickles"].push_back(std::move(p));
    if (!error.is_null()) continue;
    if (m.alternative ? !m.stream.StopsWhereLoaderStops() : m.stream.stream_error.has_value()) {
      error = "a reading stopped where its loader reads on";
    } else if (!m.alternative) {
      for (const PickleFacts& p : m.stream.pickles) {
        if (p.error) error = p.error->message;
      }
    }
  }
  out["stream_error"] = std::move(error);
  return out;
}

nlohmann::json Describe(const std::string& path, const Vm& vm) {
  nlohmann::json out;
  out["file"] = path;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    out["stream_error"] = "cannot open";
    out["pickles"] = nlohmann::json::array();
    out["trailing_bytes"] = 0;
    return out;
  }
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  StreamFacts facts = vm.ScanStream(data);
  nlohmann::json pickles = Pickles(facts, "");
  out["pickles"] = std::move(pickles);
  out["trailing_bytes"] = facts.trailing_bytes;
  out["stream_error"] =
      facts.stream_error ? nlohmann::json(facts.stream_error->message) : nlohmann::json(nullptr);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int first = 1;
  ckptscan::pickle::Loader loader = ckptscan::pickle::Loader::kPickle;
  auto describe = Describe;
  if (argc > 1 && std::string(argv[1]) == "--joblib") {
    loader = ckptscan::pickle::Loader::kJoblib;
    first = 2;
  } else if (argc > 1 && std::string(argv[1]) == "--python") {
    loader = ckptscan::pickle::Loader::kPython;
    first = 2;
  } else if (argc > 1 && std::string(argv[1]) == "--read-file") {
    describe = DescribeFile;
    first = 2;
  }
  if (argc <= first) {
    std::cerr << "usage: pickle_facts [--joblib|--python|--read-file] FILE... | pickle_facts "
                 "[--joblib|--python|--read-file] --stdin\n";
    return 64;
  }
  const Vm vm(ckptscan::pickle::Limits{}, loader);
  if (std::string(argv[first]) == "--stdin") {
    std::string line;
    while (std::getline(std::cin, line)) {
      if (!line.empty()) std::cout << Dump(describe(line, vm)) << "\n";
    }
  } else {
    for (int i = first; i < argc; ++i) std::cout << Dump(describe(argv[i], vm)) << "\n";
  }
  std::cout.flush();
  return 0;
}
