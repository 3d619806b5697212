// Tests of the shipped rules (rules/default_rules.textproto): that they load, that the
// allowlist is exactly what a checkpoint needs and never overlaps the denylist, and that the
// denylist covers the published lists of picklescan, ModelScan, Fickling and ModelAudit, and
// the known gadgets.
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "rules/catalogue.h"
#include "rules/default_rules_data.h"
#include "rules/facts_builder_for_test.h"
#include "rules/rule_set.h"

namespace ckptscan::rules {
namespace {

using ::ckptscan::rules::testing::FactsBuilder;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

const std::string kSourcePath = std::string(CKPT_SOURCE_DIR) + "/rules/default_rules.textproto";

std::string ReadSource() {
  std::ifstream in(kSourcePath, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The verdict and rule id the default rules give one global, not called.
std::pair<v1::Verdict, std::string> Grade(const RuleSet& rules, const std::string& module,
                                          const std::string& name) {
  FactsBuilder b;
  b.Global(module, name, pickle::Via::kStackGlobal);
  Evaluation e = rules.Evaluate(b.Stream(), "");
  std::string ids;
  for (const v1::Finding& f : e.findings)
    absl::StrAppend(&ids, ids.empty() ? "" : ",", f.rule_id());
  return {e.verdict, ids};
}

TEST(DefaultRulesTest, LoadAndValidate) {
  std::shared_ptr<const RuleSet> rules = RuleSet::Default();
  ASSERT_NE(rules, nullptr);
  EXPECT_THAT(rules->version(), MatchesRegex("20[0-9][0-9]\\.[0-9][0-9]?\\.[0-9]+"));
  EXPECT_GT(rules->proto().allow_size(), 80);
  EXPECT_GT(rules->proto().deny_size(), 300);
  EXPECT_EQ(RuleSet::Default(), rules);  // parsed once, shared
}

TEST(DefaultRulesTest, EmbeddedRulesAreTheSourceFileEncoded) {
  const std::string source = ReadSource();
  ASSERT_FALSE(source.empty()) << kSourcePath;
  absl::StatusOr<std::shared_ptr<const RuleSet>> text = RuleSet::FromTextProto(source, "source");
  ASSERT_TRUE(text.ok()) << text.status();
  absl::StatusOr<std::shared_ptr<const RuleSet>> binary =
      RuleSet::FromBinaryProto(internal::DefaultRulesBinary(), "embedded");
  ASSERT_TRUE(binary.ok()) << binary.status();
  EXPECT_EQ((*binary)->proto().SerializeAsString(), (*text)->proto().SerializeAsString());
}

TEST(DefaultRulesTest, BinaryRulesAreValidatedLikeText) {
  EXPECT_FALSE(RuleSet::FromBinaryProto("\xff\xff\xff", "garbage").ok());
  v1::RuleSet empty_version;
  empty_version.add_allow()->set_module("m");
  EXPECT_FALSE(RuleSet::FromBinaryProto(empty_version.SerializeAsString(), "no version").ok());
}

TEST(DefaultRulesTest, SourceFileLoadsThroughFromFileToTheSameRules) {
  absl::StatusOr<std::shared_ptr<const RuleSet>> r = RuleSet::FromFile(kSourcePath);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->proto().SerializeAsString(), RuleSet::Default()->proto().SerializeAsString());
}

TEST(DefaultRulesTest, EveryAllowEntryExplainsWhyItIsNeeded) {
  for (const v1::AllowedGlobal& a : RuleSet::Default()->proto().allow()) {
    EXPECT_GE(a.note().size(), 10u) << a.module() << "." << a.name();
  }
}

TEST(DefaultRulesTest, ArgAnyIsOnlyUsedWhereTheNoteJustifiesIt) {
  for (const v1::AllowedGlobal& a : RuleSet::Default()->proto().allow()) {
    bool any = false;
    for (const v1::CallShape& s : a.calls()) {
      for (const v1::ArgSpec& spec : s.args()) {
        for (int k : spec.any_of()) any = any || k == v1::ARG_ANY;
      }
    }
    if (any) {
      EXPECT_THAT(a.note(), ContainsRegex("ANY|any value")) << a.module() << "." << a.name();
    }
  }
}

TEST(DefaultRulesTest, EveryDenyEntryExplainsItselfAndNamesItsSource) {
  for (const v1::DenyEntry& d : RuleSet::Default()->proto().deny()) {
    EXPECT_FALSE(d.why().empty()) << d.module() << " " << d.name();
    EXPECT_FALSE(d.source().empty()) << d.module() << " " << d.name();
  }
}

TEST(DefaultRulesTest, DenyEntriesThatRunCodeAreDangerous) {
  const std::set<v1::Category> runs_code = {v1::CATEGORY_EXEC,         v1::CATEGORY_SHELL,
                                            v1::CATEGORY_IMPORT,       v1::CATEGORY_NESTED_LOADER,
                                            v1::CATEGORY_FFI,          v1::CATEGORY_PACKAGING,
                                            v1::CATEGORY_DEBUG_PROFILE};
  for (const v1::DenyEntry& d : RuleSet::Default()->proto().deny()) {
    if (runs_code.count(d.category()) > 0) {
      EXPECT_TRUE(d.dangerous()) << d.module() << " " << d.name();
    }
  }
}

// The consistency check: no allow entry is something the denylist matches (by any of its
// rules: exact, module wildcard, attribute-chain suffix, bare name), and none has a dunder.
TEST(DefaultRulesTest, AllowlistContainsNoEntryTheDenylistMatches) {
  v1::RuleSet deny_only = RuleSet::Default()->proto();
  deny_only.clear_allow();
  std::string text;
  ASSERT_TRUE(google::protobuf::TextFormat::PrintToString(deny_only, &text));
  absl::StatusOr<std::shared_ptr<const RuleSet>> denylist = RuleSet::FromTextProto(text, "deny");
  ASSERT_TRUE(denylist.ok()) << denylist.status();
  // The deliberate overlaps: data types allowed by name (with their pickled call shapes)
  // inside modules whose other names stay graded by a wildcard: joblib's array placeholders
  // (the rest of joblib: loaders, cloudpickle, parallel helpers), uuid.UUID (the node-id
  // helpers that run commands are denied by name) and the pathlib classes (their methods that
  // change files are denied by name).
  std::set<std::string> deliberate = {"uuid.UUID"};
  for (const char* module : {"pathlib", "pathlib._local"}) {
    for (const char* cls : {"PurePosixPath", "PureWindowsPath", "PosixPath", "WindowsPath"}) {
      deliberate.insert(absl::StrCat(module, ".", cls));
    }
  }
  for (const v1::AllowedGlobal& a : RuleSet::Default()->proto().allow()) {
    if (a.module() == "joblib.numpy_pickle" &&
        (a.name() == "NumpyArrayWrapper" || a.name() == "NDArrayWrapper" ||
         a.name() == "ZNDArrayWrapper")) {
      continue;
    }
    if (deliberate.count(a.module() + "." + a.name()) > 0) {
      // Still graded, never DANGEROUS: a wrong call shape of an allowed data type is odd, not
      // an attack by itself (its arguments are judged on their own).
      EXPECT_NE(Grade(**denylist, a.module(), a.name()).first, v1::VERDICT_DANGEROUS)
          << a.module() << "." << a.name();
      continue;
    }
    auto [verdict, ids] = Grade(**denylist, a.module(), a.name());
    EXPECT_EQ(ids, "global.unlisted") << a.module() << "." << a.name();
  }
}

TEST(DefaultRulesTest, AllowlistHasWhatTorchSaveNeeds) {
  const RuleSet& rules = *RuleSet::Default();
  const std::vector<std::pair<std::string, std::string>> needed = {
      {"torch._utils", "_rebuild_tensor"},
      {"torch._utils", "_rebuild_tensor_v2"},
      {"torch._utils", "_rebuild_tensor_v3"},
      {"torch._utils", "_rebuild_parameter"},
      {"torch._utils", "_rebuild_parameter_with_state"},
      {"torch._utils", "_rebuild_qtensor"},
      {"torch._utils", "_rebuild_sparse_tensor"},
      {"torch._utils", "_rebuild_meta_tensor_no_storage"},
      {"torch._tensor", "_rebuild_from_type_v2"},
      {"torch", "FloatStorage"},
      {"torch", "BFloat16Storage"},
      {"torch", "QUInt2x4Storage"},
      {"torch", "UntypedStorage"},
      {"torch.storage", "TypedStorage"},
      {"torch.storage", "UntypedStorage"},
      {"torch", "float32"},
      {"torch", "bfloat16"},
      {"torch", "float8_e5m2"},
      {"torch", "float8_e4m3fnuz"},
      {"torch", "uint16"},
      {"torch", "uint64"},
      {"torch", "complex32"},
      {"torch", "qint8"},
      {"torch", "quint4x2"},
      {"torch", "Size"},
      {"torch", "device"},
      {"torch", "Tensor"},
      {"torch.nn.parameter", "Parameter"},
      {"torch.serialization", "_get_layout"},
      {"torch", "per_tensor_affine"},
      {"torch", "per_channel_affine_float_qparams"},
      {"torch.torch_version", "TorchVersion"},
      {"collections", "OrderedDict"},
      {"collections", "Counter"},
      {"collections", "defaultdict"},
      {"_codecs", "encode"},
      {"builtins", "set"},
      {"builtins", "frozenset"},
      {"builtins", "bytearray"},
      {"builtins", "complex"},
      {"builtins", "slice"},
      {"copyreg", "_reconstructor"},
      {"numpy.core.multiarray", "_reconstruct"},
      {"numpy._core.multiarray", "_reconstruct"},
      {"numpy", "ndarray"},
      {"numpy", "dtype"},
      {"numpy.core.multiarray", "scalar"},
      {"numpy._core.multiarray", "scalar"},
      {"numpy.random._pickle", "__randomstate_ctor"},
      {"numpy.random._pickle", "__bit_generator_ctor"},
      {"numpy.random._pickle", "__generator_ctor"},
      {"argparse", "Namespace"},
      {"datetime", "datetime"},
      {"datetime", "date"},
      {"datetime", "time"},
      {"datetime", "timedelta"},
      {"datetime", "timezone"},
  };
  for (const auto& [module, name] : needed) {
    EXPECT_EQ(Grade(rules, module, name).first, v1::VERDICT_SAFE) << module << "." << name;
  }
  for (const v1::AllowedGlobal& a : rules.proto().allow()) {
    if (a.module() == "collections" && a.name() == "OrderedDict") {
      EXPECT_TRUE(a.build_target() && a.setitem_target() && a.dict_like());
    }
    if (a.module() == "torch._utils") {
      EXPECT_TRUE(a.tensor()) << a.name();
    }
  }
}

TEST(DefaultRulesTest, AllowlistOmitsWhatOtherScannersWronglyAllow) {
  // Fickling's ML_ALLOWLIST allowlists torch.storage._load_from_bytes (a nested
  // torch.load) and _io.BytesIO; ModelAudit allowlists dill and joblib's loaders. None belong
  // here. (joblib's NumpyArrayWrapper placeholder is allowed: ckptscan reads joblib files the
  // way joblib.load does and scans the object-array pickles inside them.)
  const RuleSet& rules = *RuleSet::Default();
  for (const auto& [module, name] : std::vector<std::pair<std::string, std::string>>{
           {"torch.storage", "_load_from_bytes"},
           {"_io", "BytesIO"},
           {"torch", "load"},
           {"dill._dill", "_create_function"},
           {"joblib.numpy_pickle", "NumpyUnpickler"},
           {"joblib", "load"},
           {"builtins", "getattr"},
           {"torch", "FloatTensor"},
           {"__main__", "TrainingArguments"},
           {"functools", "partial"}}) {
    EXPECT_NE(Grade(rules, module, name).first, v1::VERDICT_SAFE) << module << "." << name;
  }
}

// Published gadgets (fixed and still-open PoCs, the hacnho corpus), nested loaders, and
// the exact names of the anchors' function lists: each must grade DANGEROUS with this rule.
TEST(DefaultRulesTest, KnownGadgetsAreDangerous) {
  const RuleSet& rules = *RuleSet::Default();
  const std::vector<std::tuple<std::string, std::string, std::string>> gadgets = {
      {"os", "system", "shell"},
      {"posix", "system", "shell"},
      {"nt", "system", "shell"},
      {"subprocess", "Popen", "shell"},
      {"builtins", "eval", "exec"},
      {"builtins", "exec", "exec"},
      {"builtins", "compile", "exec"},
      {"builtins", "getattr", "introspection"},
      {"builtins", "__import__", "import"},
      {"builtins", "open", "filesystem"},
      {"builtins", "breakpoint", "debug_profile"},
      {"__builtin__", "apply", "introspection"},
      {"pip", "main", "packaging"},
      {"pydoc", "pipepager", "shell"},
      {"venv", "create", "packaging"},
      {"functools", "partial", "introspection"},
      {"torch._inductor.codecache", "compile_file", "exec"},
      {"timeit", "timeit", "exec"},
      {"numpy.testing._private.utils", "runstring", "exec"},
      {"ssl", "get_server_certificate", "network"},
      {"commands", "getoutput", "shell"},
      {"torch.utils.bottleneck.__main__", "run_cprofile", "debug_profile"},
      {"torch._dynamo.guards", "GuardBuilder.get", "exec"},
      {"torch.fx.experimental.symbolic_shapes", "ShapeEnv.evaluate_guards_expression", "exec"},
      {"torch.utils.collect_env", "run", "shell"},
      {"torch.utils.collect_env", "run_and_read_all", "shell"},
      {"torch.utils.data.datapipes.utils.decoder", "basichandlers", "nested_loader"},
      {"torch.jit.unsupported_tensor_ops", "execWrapper", "exec"},
      {"torch.utils._config_module", "ConfigModule.load_config", "nested_loader"},
      {"trace", "Trace.runctx", "debug_profile"},
      {"profile", "Profile.run", "debug_profile"},
      {"cProfile", "runctx", "debug_profile"},
      {"code", "InteractiveInterpreter.runcode", "exec"},
      {"idlelib.pyshell", "ModifiedInterpreter.runcode", "exec"},
      {"idlelib.run", "Executive.runcode", "exec"},
      {"idlelib.autocomplete", "AutoComplete.get_entity", "exec"},
      {"lib2to3.pgen2.grammar", "Grammar.loads", "nested_loader"},
      {"lib2to3.pgen2.pgen", "ParserGenerator.make_label", "exec"},
      {"ensurepip", "_run_pip", "packaging"},
      {"doctest", "debug_script", "exec"},
      {"asyncio.unix_events", "_UnixSubprocessTransport._start", "shell"},
      {"distutils.file_util", "write_file", "filesystem"},
      {"ctypes", "CDLL", "ffi"},
      {"pydoc", "locate", "import"},
      {"operator", "methodcaller", "introspection"},
      {"pty", "spawn", "shell"},
      {"socket", "create_connection", "network"},
      {"numpy.f2py.crackfortran", "myeval", "exec"},
      {"numpy.f2py", "getlincoef", "exec"},
      {"_operator", "attrgetter", "introspection"},
      {"_io", "FileIO", "filesystem"},
      {"urllib.request", "urlopen", "network"},
      {"types", "CodeType", "exec"},
      {"cloudpickle.cloudpickle", "_make_function", "exec"},
      {"logging", "FileHandler", "filesystem"},
      {"pkgutil", "resolve_name", "import"},
      {"uuid", "_get_command_stdout", "shell"},
      {"_osx_support", "compiler_fixup", "shell"},
      {"_aix_support", "aix_platform", "shell"},
      {"imaplib", "IMAP4_stream", "shell"},
      {"_pyrepl.pager", "pipe_pager", "shell"},
      {"test.support.script_helper", "assert_python_ok", "exec"},
      // Still open against HEAD denylists.
      {"importlib", "import_module", "import"},
      {"marshal", "loads", "nested_loader"},
      {"types", "FunctionType", "exec"},
      {"inspect", "getattr_static", "introspection"},
      {"codecs", "open", "filesystem"},
      {"io", "open", "filesystem"},
      {"http.client", "HTTPSConnection", "network"},
      {"multiprocessing.util", "spawnv_passfds", "shell"},
      {"mlflow.projects.backend.local", "_run_entry_point", "shell"},
      {"pandas", "read_csv", "network"},
      {"urllib", "urlopen", "network"},
      {"pathlib", "Path.write_text", "filesystem"},
      {"dill._dill", "loads", "nested_loader"},
      // hacnho stdlib corpus.
      {"resource", "setrlimit", "process"},
      {"gzip", "open", "filesystem"},
      {"bz2", "open", "filesystem"},
      {"lzma", "open", "filesystem"},
      {"weakref", "finalize", "process"},
      {"atexit", "register", "process"},
      {"dbm", "open", "filesystem"},
      {"xml.sax", "parse", "network"},
      {"http.server", "HTTPServer", "network"},
      {"socketserver", "TCPServer", "network"},
      {"glob", "glob", "filesystem"},
      {"py_compile", "compile", "filesystem"},
      // Nested and remote loaders.
      {"pickle", "loads", "nested_loader"},
      {"_pickle", "loads", "nested_loader"},
      {"torch", "load", "nested_loader"},
      {"torch.serialization", "load", "nested_loader"},
      {"torch.storage", "_load_from_bytes", "nested_loader"},
      {"joblib", "load", "nested_loader"},
      {"numpy", "load", "nested_loader"},
      {"pandas", "read_pickle", "nested_loader"},
      {"torch.hub", "load", "network"},
      {"torch.hub", "load_state_dict_from_url", "network"},
      {"transformers.models.auto.auto_factory", "getattribute_from_module", "introspection"},
      {"transformers", "AutoModel.from_pretrained", "network"},
      {"torch.distributed.rpc", "rpc_sync", "network"},
  };
  for (const auto& [module, name, category] : gadgets) {
    auto [verdict, ids] = Grade(rules, module, name);
    EXPECT_EQ(verdict, v1::VERDICT_DANGEROUS) << module << "." << name << " -> " << ids;
    EXPECT_EQ(ids, "global.denied." + category) << module << "." << name;
  }
}

// Whole modules the anchors deny (picklescan `*` list, ModelScan, Fickling UNSAFE_IMPORTS and
// ML modules, ModelAudit ALWAYS_DANGEROUS_MODULES): any name in them is DANGEROUS, except the
// few the lists mark as merely odd (select, selectors) and the builtins modules, which carry
// per-name entries because the allowlist needs builtins.set and friends.
TEST(DefaultRulesTest, AnchorModulesAreDeniedWhole) {
  const RuleSet& rules = *RuleSet::Default();
  const std::string modules =
      // picklescan 1.0.5
      "aiohttp asyncio bdb commands ctypes httplib numpy.f2py numpy.testing._private.utils nt "
      "posix os requests.api runpy shutil socket ssl subprocess sys cProfile "
      "distutils.file_util pdb pickle _pickle pip pty profile pydoc test timeit urllib.request "
      "venv webbrowser _osx_support _aix_support _pyrepl "
      // ModelScan
      "aiohttp.client "
      // Fickling UNSAFE_IMPORTS and UnsafeImportsML
      "__builtins__ multiprocessing _posixsubprocess code codeop marshal types doctest "
      "_interpreters _xxsubinterpreters importlib _frozen_importlib _frozen_importlib_external "
      "_imp imp pkgutil zipimport gc site unittest inspect _operator operator functools trace "
      "http urllib urllib2 requests smtplib imaplib ftplib poplib telnetlib nntplib _ctypes "
      "dill cloudpickle joblib tempfile filecmp distutils pexpect pipes ensurepip idlelib "
      "lib2to3 socketserver xmlrpc signal _signal threading _thread atexit sqlite3 _sqlite3 "
      "fileinput glob platform linecache compileall py_compile mmap logging syslog tarfile "
      "zipfile shelve torch.hub torch._dynamo torch._inductor torch.jit numpy.distutils "
      // ModelAudit
      "ctypes.util multiprocessing.pool asyncio.subprocess dill._dill xmlrpc.client "
      "xmlrpc.server posixpath ntpath";
  for (absl::string_view m : absl::StrSplit(modules, ' ', absl::SkipEmpty())) {
    auto [verdict, ids] = Grade(rules, std::string(m), "anything");
    EXPECT_EQ(verdict, v1::VERDICT_DANGEROUS) << m << " -> " << ids;
    EXPECT_TRUE(absl::StartsWith(ids, "global.denied.")) << m << " -> " << ids;
  }
  EXPECT_EQ(Grade(rules, "select", "select").second, "global.denied.network");
  EXPECT_EQ(Grade(rules, "select", "select").first, v1::VERDICT_SUSPICIOUS);
  // picklescan denies uuid whole for its command-running helpers; here those are denied by
  // name and the module's data type (uuid.UUID) is allowlisted, so a UUID in a checkpoint's
  // metadata does not turn it red (Lib/uuid.py: UUID.__setstate__ only stores an int).
  for (const char* helper : {"_get_command_stdout", "_popen", "_ip_getnode", "_ifconfig_getnode",
                             "_arp_getnode", "_netstat_getnode", "_lanscan_getnode", "getnode",
                             "uuid1", "_find_mac_near_keyword", "_find_mac_under_heading"}) {
    EXPECT_EQ(Grade(rules, "uuid", helper).first, v1::VERDICT_DANGEROUS) << helper;
  }
  EXPECT_EQ(Grade(rules, "uuid", "uuid4").first, v1::VERDICT_SUSPICIOUS);
  // pathlib: constructing a path does no I/O; the methods that change files are DANGEROUS in
  // every module spelling (Python 3.13 names pathlib._local), reading ones SUSPICIOUS.
  for (const char* module : {"pathlib", "pathlib._local"}) {
    for (const char* method : {"Path.write_text", "PosixPath.write_bytes", "Path.unlink",
                               "PosixPath.rename", "WindowsPath.open", "Path.mkdir",
                               "PosixPath.symlink_to", "Path.touch", "Path.chmod"}) {
      EXPECT_EQ(Grade(rules, module, method).first, v1::VERDICT_DANGEROUS)
          << module << "." << method;
    }
    EXPECT_EQ(Grade(rules, module, "Path.read_text").first, v1::VERDICT_SUSPICIOUS) << module;
  }
}

TEST(DefaultRulesTest, BuiltinsOutsideTheAllowlistAreNeverSafe) {
  const RuleSet& rules = *RuleSet::Default();
  for (const char* name :
       {"eval", "exec", "compile", "getattr", "setattr", "delattr", "globals", "vars", "__import__",
        "open", "breakpoint", "input", "map", "type", "memoryview", "super"}) {
    EXPECT_NE(Grade(rules, "builtins", name).first, v1::VERDICT_SAFE) << name;
  }
}

}  // namespace
}  // namespace ckptscan::rules
