#include "rules/catalogue.h"

#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

// What to do, shared by every global.denied.* entry (a literal, so help stays static storage).
#define CKPT_DENIED_HELP_TAIL                                                             \
  " The file is DANGEROUS when the matching deny entry is marked dangerous, SUSPICIOUS "  \
  "otherwise. Do not load it with pickle or torch.load(weights_only=False); obtain the "  \
  "weights from a trusted source, or re-save only the tensors (state_dict) in a trusted " \
  "environment."

namespace ckptscan::rules {
namespace {

using v1::Verdict;

constexpr Verdict kSuspicious = v1::VERDICT_SUSPICIOUS;
constexpr Verdict kDangerous = v1::VERDICT_DANGEROUS;
constexpr Verdict kError = v1::VERDICT_ERROR;

std::vector<RuleInfo> Build() {
  const auto denied = [](std::string_view id, std::string_view title, std::string_view help,
                         v1::Severity severity) {
    return RuleInfo{id, title, help, kDangerous, severity};
  };
  std::vector<RuleInfo> v = {
      denied("global.denied.exec", "Global that executes code",
             "The pickle imports a callable that evaluates or executes code (eval, exec, "
             "compile, code objects, code-running helpers such as timeit or "
             "runpy)." CKPT_DENIED_HELP_TAIL,
             v1::SEVERITY_CRITICAL),
      denied("global.denied.shell", "Global that runs shell commands or programs",
             "The pickle imports something that starts processes or shell commands (os.system, "
             "subprocess, pty, pagers, hidden-shell stdlib helpers)." CKPT_DENIED_HELP_TAIL,
             v1::SEVERITY_CRITICAL),
      denied("global.denied.import", "Import trampoline",
             "The pickle imports a function that imports or resolves arbitrary modules by name "
             "(__import__, importlib, pkgutil.resolve_name, pydoc.locate, sys.modules), which "
             "turns any string into any callable." CKPT_DENIED_HELP_TAIL,
             v1::SEVERITY_CRITICAL),
      denied("global.denied.filesystem", "Global that reads or writes files",
             "The pickle imports a file primitive (open, io.FileIO, shutil, pathlib, logging "
             "file handlers, archives). Writing a .pth file into site-packages runs code at "
             "the next interpreter start." CKPT_DENIED_HELP_TAIL,
             v1::SEVERITY_HIGH),
      denied("global.denied.network", "Global that uses the network",
             "The pickle imports a network primitive (sockets, HTTP clients, URL fetchers) or a "
             "remote model loader (torch.hub, from_pretrained), which can exfiltrate data or "
             "fetch and run remote code." CKPT_DENIED_HELP_TAIL,
             v1::SEVERITY_HIGH),
      denied("global.denied.nested_loader", "Nested loader",
             "The pickle imports a deserializer (pickle.loads, torch.load, marshal, dill, "
             "joblib, yaml.load, numpy.load) that would load a second payload this scan cannot "
             "vouch for." CKPT_DENIED_HELP_TAIL,
             v1::SEVERITY_CRITICAL),
      denied("global.denied.introspection", "Introspection gadget",
             "The pickle imports an attribute or call trampoline (getattr, operator.attrgetter, "
             "methodcaller, functools.partial, inspect, gc): the building blocks that reach a "
             "dangerous callable without naming it." CKPT_DENIED_HELP_TAIL,
             v1::SEVERITY_HIGH),
      denied("global.denied.ffi", "Foreign function interface",
             "The pickle imports ctypes/cffi or a native-library loader: native code and raw "
             "memory access." CKPT_DENIED_HELP_TAIL,
             v1::SEVERITY_CRITICAL),
      denied("global.denied.debug_profile", "Debugger or profiler",
             "The pickle imports a debugger, profiler or tracer entry point (pdb, cProfile, "
             "profile, trace, bdb) that runs the code it is given." CKPT_DENIED_HELP_TAIL,
             v1::SEVERITY_CRITICAL),
      denied("global.denied.packaging", "Package installer",
             "The pickle imports pip, ensurepip, venv or setuptools entry points, which install "
             "and run packages." CKPT_DENIED_HELP_TAIL,
             v1::SEVERITY_CRITICAL),
      denied("global.denied.process", "Process, thread or signal control",
             "The pickle imports something that starts threads or processes, installs signal "
             "or exit handlers, or changes process limits or the environment: deferred "
             "execution and tampering with the loading process." CKPT_DENIED_HELP_TAIL,
             v1::SEVERITY_HIGH),
      denied("global.denied.other", "Other denied global",
             "The pickle imports a global on the denylist for another reason (scanner "
             "deactivation, loader-policy tampering, payload decoding). Decoders and other odd "
             "but harmless names only make the file SUSPICIOUS." CKPT_DENIED_HELP_TAIL,
             v1::SEVERITY_MEDIUM),
      RuleInfo{"global.unlisted", "Global not on the allowlist",
               "The pickle imports a global that is neither on the allowlist nor known "
               "dangerous, or reads one by builtins.getattr(Class, 'NAME') (how Python 3.11 "
               "pickles an Enum member: judged as the name Class.NAME). Importing a module runs "
               "its code, and calling the global runs more. Typical causes: a whole model "
               "object (torch.save(model)) instead of its state_dict, or a custom class in the "
               "checkpoint. Re-save the state_dict, or, if you trust the class, allow it with "
               "the --allow flag the finding prints (or a rules overlay entry).",
               kSuspicious, v1::SEVERITY_MEDIUM},
      RuleInfo{"global.dunder", "Dunder attribute in a global's name",
               "A component of the global's qualified name is a dunder (__x__), e.g. "
               "numpy.__builtins__ or Foo.__subclasses__: attribute chains that reach "
               "interpreter internals. DANGEROUS for the known escape hatches (__builtins__, "
               "__globals__, __import__, __subclasses__, __getattribute__, __reduce__, "
               "__dict__, __class__, ...), SUSPICIOUS for any other dunder.",
               kSuspicious, v1::SEVERITY_MEDIUM},
      RuleInfo{"opcode.ext", "EXT opcode (copyreg extension registry)",
               "EXT1/EXT2/EXT4 load a global through copyreg's extension registry by number: "
               "the module and name are not in the file, so what is imported depends on the "
               "loading process. Never SAFE. torch.save never writes EXT opcodes.",
               kSuspicious, v1::SEVERITY_HIGH},
      RuleInfo{"global.dynamic", "Import of a name computed at load time",
               "STACK_GLOBAL takes the module and name from the stack; here at least one of "
               "them is the result of a call (e.g. _codecs.encode('bf', 'rot13') gives 'os'), "
               "so the file does not say what it imports. No pickler writes this.",
               kDangerous, v1::SEVERITY_CRITICAL},
      RuleInfo{"call.callee", "Call of something that is not a named global",
               "A call opcode (REDUCE, NEWOBJ, OBJ, INST) calls a value that is not a global "
               "the pickle imported by name, typically the result of another call: the shape "
               "of getattr-chain gadgets (getattr(module, 'system')('id')).",
               kSuspicious, v1::SEVERITY_HIGH},
      RuleInfo{"call.shape", "Allowlisted global called with an unexpected shape",
               "An allowlisted global is called with an opcode, argument count or argument "
               "kinds that no allowed call shape matches (for example OrderedDict called with "
               "an int). The message says what was expected and what was found. A legitimate "
               "torch.save never does this; report it if a stock tool produced the file.",
               kSuspicious, v1::SEVERITY_MEDIUM},
      RuleInfo{"call.build", "BUILD on an object that does not accept state",
               "BUILD (obj.__setstate__ or a __dict__ update) targets something that is not "
               "an object of an allowlisted build target. On a global (a class or module) it "
               "is setattr on shared code, the write primitive of attribute-chain gadgets: "
               "DANGEROUS. On anything else: SUSPICIOUS.",
               kSuspicious, v1::SEVERITY_MEDIUM},
      RuleInfo{"call.build_state", "BUILD state that its loader does not write",
               "BUILD gives an object of an allowlisted class a state that is none of the "
               "states numpy, torch or Python write for it. The code that receives the state "
               "trusts it: numpy.dtype's flags (an object flag on raw bytes makes numpy use "
               "them as pointers), positions into a random generator's key and buffer arrays, "
               "an OrderedDict's or an object's attributes. Each allowlisted build target lists "
               "the states it accepts (`rules show`).",
               kSuspicious, v1::SEVERITY_HIGH},
      RuleInfo{"call.cost", "Allowed call too costly to load",
               "A call (or BUILD) of an allowlisted global has the shape its entry allows, but "
               "an argument passes one of the entry's cost bounds (rules fields max_bytes, "
               "max_int_bits, max_elements, max_sized_bytes, number_text, a call check, or the "
               "rule set's cost_budget): loading it would take hours of CPU or gigabytes of "
               "memory (Fraction('1e999999999'), a numpy array allocated from its shape alone), "
               "or wrap numpy's item size around. The file is not verified (ERROR). If a stock "
               "tool wrote it, report it with the value the message names.",
               kError, v1::SEVERITY_MEDIUM},
      RuleInfo{"call.setitem", "SETITEM(S) on an object that is not an allowed mapping",
               "SETITEM/SETITEMS stores items into something that is neither a plain dict nor "
               "an object of an allowlisted setitem target (OrderedDict, defaultdict). On a "
               "global (os.environ, sys.modules) it mutates process state (HIGH severity).",
               kSuspicious, v1::SEVERITY_MEDIUM},
      RuleInfo{"call.append", "APPEND(S)/ADDITEMS on an object that is not an allowed sequence",
               "APPEND/APPENDS/ADDITEMS adds items to something that is neither a plain "
               "list/set nor an object of an allowlisted append target: a call of its "
               "append/extend/add method (torch's CVE-2026-24747 class).",
               kSuspicious, v1::SEVERITY_MEDIUM},
      RuleInfo{"persid.shape", "Persistent id that is not a storage reference",
               "BINPERSID with an id that is not ('storage', <storage class>, ...). torch.save "
               "writes only storage ids; anything else (e.g. ('module', ...) ids of pickled "
               "nn.Module classes) depends on the loader's persistent_load.",
               kSuspicious, v1::SEVERITY_MEDIUM},
      RuleInfo{"persid.text", "Text PERSID opcode",
               "The protocol-0 PERSID opcode passes a text id to persistent_load; torch.save "
               "never writes it.",
               kSuspicious, v1::SEVERITY_MEDIUM},
      RuleInfo{"stream.trailing", "Bytes after the last pickle",
               "The stream continues after the last STOP with bytes that are not another "
               "pickle. A loader reading the stream further could interpret them (a polyglot). "
               "Legacy torch files carry raw storage bytes after the pickles; those are parsed "
               "by the container layer, not reported here.",
               kSuspicious, v1::SEVERITY_LOW},
      RuleInfo{"scan.error", "The file could not be verified",
               "Parsing stopped (malformed input, unsupported construct, a limit hit, a "
               "timeout) or the scan facts were inconsistent. Nothing is SAFE unless verified "
               "whole: the verdict is ERROR unless a finding is worse.",
               kError, v1::SEVERITY_MEDIUM},
      // Container anomalies (core/formats/read_file.h, core/zip): emitted by the trusted side from
      // the worker's facts, one id per kind.
      RuleInfo{"container.polyglot", "The file is also another format",
               "The same bytes read as another format (a pickle before or inside a zip, a zip "
               "after a pickle) name globals: a different loader would run that reading. Both "
               "readings are scanned; do not load the file.",
               kSuspicious, v1::SEVERITY_HIGH},
      RuleInfo{"container.torchscript", "TorchScript archive",
               "The archive has a constants.pkl record: torch.load hands it to torch.jit.load, "
               "which runs TorchScript code and ignores weights_only (CVE-2025-32434). Never SAFE; "
               "load TorchScript only from trusted sources.",
               kSuspicious, v1::SEVERITY_HIGH},
      RuleInfo{"container.nested_archive", "Archive inside the archive",
               "A member is itself a zip archive; it is read too (to a bounded depth). Checkpoints "
               "do not nest archives: find out why it is there.",
               kSuspicious, v1::SEVERITY_MEDIUM},
      RuleInfo{"container.unreferenced_storage", "Storage record nothing refers to",
               "A data/<key> record that data.pkl never refers to. torch ignores it, but it can "
               "carry a payload for another reader.",
               kSuspicious, v1::SEVERITY_LOW},
      RuleInfo{"container.unexpected_member", "Record torch.save does not write",
               "A member that is not data.pkl, a storage, or one of torch's small records. It was "
               "trial-parsed as a pickle; its findings, if any, are reported separately.",
               kSuspicious, v1::SEVERITY_MEDIUM},
      RuleInfo{"container.trailing_data", "Bytes after the data the loader reads",
               "The loader stops before the end of the file (after the last legacy storage, after "
               "an .npy array, after a GGUF file's data section). Those bytes can carry a payload "
               "for another reader.",
               kSuspicious, v1::SEVERITY_LOW},
      RuleInfo{"container.byteorder", "Big-endian storages",
               "The archive's byteorder record is not 'little'. Tensors are stored big-endian.",
               kSuspicious, v1::SEVERITY_LOW},
      RuleInfo{"container.prepended_data", "Bytes before the first zip member",
               "Data before the archive (for example a pickle followed by a zip): tools disagree "
               "about what the file is.",
               kSuspicious, v1::SEVERITY_HIGH},
      RuleInfo{"container.appended_data", "Bytes after the zip end record",
               "Data after the archive's end record, which zip readers ignore.", kSuspicious,
               v1::SEVERITY_MEDIUM},
      RuleInfo{"container.archive_comment", "Zip archive comment",
               "The end record carries a comment; torch.save never writes one.", kSuspicious,
               v1::SEVERITY_LOW},
      RuleInfo{"container.multiple_eocd", "Several zip end records",
               "More than one end-record signature where miniz searches: readers can disagree "
               "about which directory is the real one.",
               kSuspicious, v1::SEVERITY_HIGH},
      RuleInfo{"container.zip64_mismatch", "Inconsistent ZIP64 record",
               "The ZIP64 end record disagrees with the 32-bit one, or is broken: readers can see "
               "different directories.",
               kSuspicious, v1::SEVERITY_HIGH},
      RuleInfo{"container.central_directory_slack", "Slack in the central directory",
               "Central-directory bytes beyond the entries it counts.", kSuspicious,
               v1::SEVERITY_MEDIUM},
      RuleInfo{"container.gap", "Bytes no entry accounts for",
               "Bytes inside the archive that no listed member covers (a hidden local entry, a "
               "shadow directory).",
               kSuspicious, v1::SEVERITY_MEDIUM},
      RuleInfo{"container.overlap", "Members sharing bytes",
               "Two members, or a member and the directory, overlap.", kSuspicious,
               v1::SEVERITY_HIGH},
      RuleInfo{"container.duplicate_name", "Duplicate member name",
               "Two entries with the same name: torch's lookup picks one copy and Python's zipfile "
               "another. Every copy is scanned.",
               kSuspicious, v1::SEVERITY_HIGH},
      RuleInfo{
          "container.duplicate_key", "Metadata key set twice",
          "A GGUF file sets one metadata key twice: ggml refuses the file, other readers keep the "
          "first or the last value. Both values are read (a chat template in either is checked).",
          kSuspicious, v1::SEVERITY_MEDIUM},
      RuleInfo{"container.duplicate_tensor", "Two tensors with one name",
               "A GGUF file names two tensors alike: ggml refuses the file, other readers keep one "
               "of them, so the weights loaded depend on the reader.",
               kSuspicious, v1::SEVERITY_MEDIUM},
      RuleInfo{"container.case_collision", "Names equal but for case",
               "Names that differ only in ASCII case: torch's lookup ignores case.", kSuspicious,
               v1::SEVERITY_HIGH},
      RuleInfo{"container.uppercase_name", "Upper case in a record name",
               "torch.save writes lower-case record names; torch's lookup ignores case, other "
               "readers do not.",
               kSuspicious, v1::SEVERITY_MEDIUM},
      RuleInfo{"container.odd_name", "Odd member name",
               "A member name with NUL, control characters, backslashes, '..' or a leading '/'.",
               kSuspicious, v1::SEVERITY_MEDIUM},
      RuleInfo{"container.name_outside_prefix", "Member outside the archive folder",
               "A member not under the archive's folder: torch.load refuses such archives; other "
               "readers do not.",
               kSuspicious, v1::SEVERITY_MEDIUM},
      RuleInfo{"container.unusual_flags", "Unusual zip flag bits",
               "Flag bits torch.save never sets (encryption, patch data, masked headers). Python's "
               "zipfile refuses what torch may still load (CVE-2025-1945).",
               kSuspicious, v1::SEVERITY_HIGH},
      RuleInfo{"container.unsupported_method", "Unsupported compression method",
               "Neither STORED nor DEFLATE: torch cannot read the member.", kSuspicious,
               v1::SEVERITY_MEDIUM},
      RuleInfo{
          "container.local_header_mismatch", "Local header differs from the central directory",
          "The local header's name, flags, method, CRC or sizes differ from the central directory "
          "(CVE-2025-1944): readers that trust one or the other read different things.",
          kSuspicious, v1::SEVERITY_HIGH},
      RuleInfo{"container.bad_local_header", "Unreadable local header",
               "A member's local header is missing, unsigned, or its data runs past the end of the "
               "file.",
               kSuspicious, v1::SEVERITY_HIGH},
      RuleInfo{"container.malformed_extra_field", "Malformed extra field",
               "An extra field that is not a well-formed list of (id, length) records (a place to "
               "hide bytes).",
               kSuspicious, v1::SEVERITY_MEDIUM},
      RuleInfo{"container.data_descriptor_mismatch", "Data descriptor differs",
               "The data descriptor's CRC or sizes differ from the central directory.", kSuspicious,
               v1::SEVERITY_MEDIUM},
      RuleInfo{"container.size_mismatch", "Stored member with two sizes",
               "A STORED member whose compressed and uncompressed sizes differ: readers take "
               "different lengths.",
               kSuspicious, v1::SEVERITY_HIGH},
      RuleInfo{"container.directory_entry", "Directory entry with data",
               "A directory entry with a size; torch would unpickle uninitialised memory.",
               kSuspicious, v1::SEVERITY_MEDIUM},
      RuleInfo{"container.not_compressed", "Compressor's first bytes, no compressed stream",
               "The file starts as joblib's compressors do (any 'x' is zlib's) but holds no "
               "stream: joblib.load fails before it unpickles a byte, and the file is read as "
               "the other loaders read it. Informational.",
               v1::VERDICT_SAFE, v1::SEVERITY_INFO},
      RuleInfo{"container.deflated", "Compressed member",
               "A DEFLATE member. torch.save writes STORED only; informational unless other "
               "anomalies come with it.",
               v1::VERDICT_SAFE, v1::SEVERITY_INFO},
      RuleInfo{"container.inflate_mismatch", "DEFLATE stream does not match its sizes",
               "The compressed stream is shorter, longer, corrupt or padded: torch may unpickle "
               "bytes we could not see.",
               kSuspicious, v1::SEVERITY_HIGH},
      RuleInfo{"container.zipfile_view", "Python's zipfile reads other members than torch",
               "Python's zipfile (numpy.load of an .npz, zipfile-based tools) finds a member that "
               "torch's reader does not (bytes prepended to the archive, a ZIP64 record away from "
               "where its locator points, entry counts that understate the directory): both "
               "readings are scanned.",
               kSuspicious, v1::SEVERITY_HIGH},
      RuleInfo{"container.crc_mismatch", "CRC mismatch",
               "The bytes do not match the CRC-32 in the directory. torch does not check CRCs; "
               "Python's zipfile refuses the member (CVE-2025-10156).",
               kSuspicious, v1::SEVERITY_MEDIUM},
      // Repository files (core/torch/repo_json.h, core/content): what loaders run on purpose.
      RuleInfo{"scan.selection", "Scanned although a pattern matched it",
               "An --include or --exclude pattern would have left the file out, but it is "
               "scanned: a sharded checkpoint's index is always checked, so that its shards are "
               "found. Informational.",
               v1::VERDICT_SAFE, v1::SEVERITY_INFO},
      RuleInfo{"scan.folder_link", "Reached through a folder link",
               "The file was found below a symbolic link to a folder (the walk follows them "
               "wherever they point, each folder once, because a loader given the path reads "
               "through them). Informational: the path shows where a loader finds it.",
               v1::VERDICT_SAFE, v1::SEVERITY_INFO},
      RuleInfo{"repo.remote_code", "Code the repository asks loaders to run",
               "A config's auto_map (in any form: an object, a tokenizer's list, a string) or "
               "custom_pipelines names classes in the repository's own Python files, or in "
               "another Hub repository (\"org/repo--module.Class\", which transformers "
               "downloads from there), or the file is a Python file (*.py): transformers "
               "imports and runs them when the model or pipeline is loaded with "
               "trust_remote_code=True. ckptscan does not judge Python code. Review it, or load "
               "the model without trust_remote_code.",
               kSuspicious, v1::SEVERITY_MEDIUM},
      RuleInfo{"repo.config_target", "Config names a Python object to build",
               "A JSON or YAML config holds a Hydra/OmegaConf `_target_` key: "
               "hydra.utils.instantiate imports the dotted path and calls it (with `_args_` and "
               "the other keys as arguments; `_partial_` defers the call). Importing a module "
               "runs its code. Review that every target is code you trust.",
               kSuspicious, v1::SEVERITY_MEDIUM},
      RuleInfo{"repo.config_code", "Config target that runs code or touches the system",
               "A `_target_` names a module or function that runs code, imports by name, loads "
               "other files or touches the system (os, subprocess, builtins, importlib, eval, "
               "exec, getattr, torch.load, yaml.unsafe_load, ...), reached at any component of "
               "the path (logging.os.system is os.system): hydra.utils.instantiate calls it. "
               "Do not instantiate the config.",
               kDangerous, v1::SEVERITY_HIGH},
      RuleInfo{"repo.yaml_python_tag", "YAML tag that builds a Python object",
               "A YAML file holds a tag that resolves to tag:yaml.org,2002:python/... (written "
               "!!python/..., through a %TAG handle, verbatim as !<...>, or percent-escaped): "
               "PyYAML's unsafe loaders (yaml.unsafe_load, yaml.load with Loader=yaml.Loader or "
               "UnsafeLoader, and their libyaml twins) import the name and build or call it "
               "(python/object/apply:os.system runs a command). Load the file with "
               "yaml.safe_load only, or not at all.",
               kDangerous, v1::SEVERITY_HIGH},
      RuleInfo{"repo.yaml_tag", "YAML tag of no standard type",
               "A YAML file holds a tag that is none of YAML's standard types (str, int, float, "
               "bool, null, map, seq, binary, timestamp, set, omap, pairs, merge, value): only "
               "a constructor the loader registers builds it, which runs that loader's code. "
               "yaml.safe_load refuses it.",
               kSuspicious, v1::SEVERITY_LOW},
      RuleInfo{"repo.outside_reference", "Reference to a model outside the scan",
               "An adapter_config.json names its base model (base_model_name_or_path) by a path "
               "on the machine (absolute, ~, ./ or ..): PEFT loads that model under the "
               "adapter, and this scan never saw it. Scan it too, or point the adapter at a "
               "reviewed Hub id.",
               kSuspicious, v1::SEVERITY_LOW},
      RuleInfo{"template.sandbox_escape", "Chat template that reaches code",
               "A chat template (tokenizer_config.json chat_template, a *.jinja file, a GGUF "
               "tokenizer.chat_template), read by Jinja's grammar and evaluated abstractly, "
               "reaches Python internals (a name starting with '_', the class hierarchy), "
               "str.format (CVE-2024-56326, CVE-2025-27516), or names an attribute by a string "
               "it builds or the model's files hold. The message says for which environment: a "
               "plain jinja2.Environment (llama-cpp-python before 0.2.72, CVE-2024-34359) or "
               "transformers' sandbox. Do not render the template; replace it with a reviewed "
               "one.",
               kDangerous, v1::SEVERITY_HIGH},
      RuleInfo{"template.unverified", "Chat template this reader cannot verify",
               "A chat template takes an attribute or item of a value of unknown type, names "
               "one by the user's data, calls something outside Jinja's filters, tests and the "
               "loaders' globals, or loads another template: nothing shows it reaches code, "
               "nothing shows it stays in data. Review the template.",
               kSuspicious, v1::SEVERITY_MEDIUM},
      RuleInfo{"template.syntax", "Chat template Jinja refuses",
               "Jinja would refuse to compile the chat template (or this reader does not model "
               "a construct in it), so nothing in it was judged. Review the template.",
               kSuspicious, v1::SEVERITY_LOW},
      // Keras archives (core/torch/keras_config.h): what config.json makes Keras build.
      RuleInfo{"keras.lambda", "Keras Lambda layer or lambda function",
               "The config holds a Lambda layer or a serialized lambda (marshalled Python "
               "bytecode): Keras rebuilds and calls it when the model is loaded or run "
               "(CVE-2024-3660). Do not load the model.",
               kDangerous, v1::SEVERITY_CRITICAL},
      RuleInfo{"keras.function", "Function from a module that is not Keras's",
               "The config names a function (\"class_name\": \"function\") in a module outside "
               "Keras: Keras imports the module and calls the function (CVE-2025-1550).",
               kDangerous, v1::SEVERITY_CRITICAL},
      RuleInfo{"keras.dangerous_object", "Object that runs code or loads other files",
               "The config names an object from a module that runs code or touches the system "
               "(os, subprocess, builtins, importlib, ...), or one of Keras's own objects that "
               "loads other files, fetches URLs, wraps another framework's modules or turns "
               "safe mode off (TorchModuleWrapper, TFSMLayer, get_file, "
               "enable_unsafe_deserialization: CVE-2025-8747, CVE-2025-9906).",
               kDangerous, v1::SEVERITY_HIGH},
      RuleInfo{"keras.foreign_object", "Object from a module that is not Keras's",
               "The config names a class in a module outside Keras, or a name Keras's "
               "serialization does not write. Keras imports the module and builds the object: "
               "its code runs. Review the module.",
               kSuspicious, v1::SEVERITY_MEDIUM},
      RuleInfo{"keras.custom_object", "Registered custom object",
               "The config names a custom object (a registered name such as "
               "\"package>Name\"): Keras looks its class up among what the loading program "
               "registered and runs its code. Review that code.",
               kSuspicious, v1::SEVERITY_MEDIUM},
      // joblib < 0.10's arrays in files beside the pickle (core/pickle/joblib_companions.h).
      RuleInfo{"joblib.companion_path", "Array file outside the pickle's folder",
               "A joblib < 0.10 array wrapper names its array's file with a path (a '/', '..', "
               "an absolute path, or an empty or unreadable name): joblib.load opens "
               "os.path.join(the pickle's folder, name), wherever that is, and for an "
               "NDArrayWrapper unpickles what it finds there. ckptscan never opens it.",
               kDangerous, v1::SEVERITY_HIGH},
      RuleInfo{"joblib.companion_pickle", "Array file that joblib.load may unpickle",
               "A joblib < 0.10 NDArrayWrapper: joblib.load reads the array from the named file "
               "beside the pickle with numpy.load(allow_pickle=True), which unpickles that file "
               "when it holds an object array or is no .npy at all. What loads is decided by "
               "that file, which this scan does not cover: scan it too.",
               kSuspicious, v1::SEVERITY_MEDIUM},
      RuleInfo{"joblib.companion_data", "Array bytes in a file beside the pickle",
               "A joblib < 0.10 ZNDArrayWrapper: joblib.load reads the array's raw bytes from "
               "the named zlib file beside the pickle (never unpickled). Informational: that "
               "file is not part of this scan.",
               v1::VERDICT_SAFE, v1::SEVERITY_INFO},
      // ONNX models (core/onnx/onnx_check.h).
      RuleInfo{"onnx.external_data_path", "External data path that may leave the model's folder",
               "A tensor's external data location is absolute, climbs out with '..', names a "
               "drive or holds a backslash or NUL: onnx.load reads the file it names, wherever "
               "it is (CVE-2022-25882, CVE-2024-27318). ckptscan never opens it.",
               kDangerous, v1::SEVERITY_HIGH},
      RuleInfo{"onnx.custom_domain", "Operators outside ONNX's own domains",
               "Nodes of an operator domain other than ONNX's (\"\", ai.onnx, ai.onnx.ml, "
               "ai.onnx.preview.training) that the model does not define as a function: a "
               "runtime runs them with operators registered by native libraries (custom "
               "operator libraries load native code). Check which runtime extension the model "
               "needs.",
               kSuspicious, v1::SEVERITY_MEDIUM},
      RuleInfo{"onnx.external_data", "Tensor data in other files",
               "The model reads tensor data from files beside it (relative locations inside "
               "its folder). Informational: those files are raw tensor bytes, not part of this "
               "scan.",
               v1::VERDICT_SAFE, v1::SEVERITY_INFO},
      RuleInfo{"file.unknown_format", "A file in no format ckptscan verifies",
               "No reading applies to the file (not a checkpoint, archive or data class, and "
               "no pickle loader reads a byte of it). Reported so with --unknown warn; by "
               "default such a file is ERROR, with --unknown skip it is listed as skipped.",
               kSuspicious, v1::SEVERITY_LOW},
      RuleInfo{"manifest.unlisted", "A file the manifest does not list",
               "scan --manifest: the file is in a scanned folder but not in the manifest, so "
               "its digest was never pinned. It is scanned like any file.",
               kSuspicious, v1::SEVERITY_LOW},
      RuleInfo{"sandbox.violation", "The scanner's sandbox was violated",
               "Parsing this file made the jailed worker attempt a system call outside its "
               "seccomp policy (open a file, create a socket, execute a program, ...); the "
               "kernel killed it with SIGSYS. The scanner's own code never does this, so the "
               "file is treated as an exploit against the scanner: DANGEROUS. Do not load it; "
               "report it. Emitted by the trusted side (sandbox/run.h), not by a rule.",
               kDangerous, v1::SEVERITY_CRITICAL},
      RuleInfo{"scan.findings_truncated", "Too many findings",
               "The scan found more findings than a report keeps (RuleSet kMaxFindings). The "
               "verdict still accounts for every finding; this entry carries the worst verdict "
               "of the ones left out.",
               kSuspicious, v1::SEVERITY_INFO},
  };
  return v;
}

}  // namespace

const std::vector<RuleInfo>& Catalogue() {
  static const std::vector<RuleInfo> catalogue = Build();
  return catalogue;
}

const RuleInfo* FindRule(std::string_view id) {
  static const absl::flat_hash_map<absl::string_view, const RuleInfo*> index = [] {
    absl::flat_hash_map<absl::string_view, const RuleInfo*> m;
    for (const RuleInfo& r : Catalogue()) m[absl::string_view(r.id.data(), r.id.size())] = &r;
    return m;
  }();
  auto it = index.find(absl::string_view(id.data(), id.size()));
  return it == index.end() ? nullptr : it->second;
}

}  // namespace ckptscan::rules
