#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/checked.h"
#include "base/escape.h"
#include "base/limit_status.h"
#include "base/strings.h"
#include "core/compress/decompress.h"
#include "core/content/content.h"
#include "core/content/template_check.h"
#include "core/formats/reader.h"
#include "core/safetensors/validator.h"
#include "core/torch/code_names.h"
#include "core/torch/keras_config.h"
#include "core/torch/legacy.h"
#include "core/torch/numpy.h"
#include "core/torch/repo_json.h"
#include "core/torch/repo_yaml.h"
#include "core/torch/tar.h"
#include "core/torch/tensors.h"
#include "core/zip/zipfile_view.h"

namespace ckptscan::formats {

bool Reader::Text(std::string_view data, torch::MemberFacts* m) {
  const content::Check c = content::CheckText(data, options_.content);
  if (c.outcome == content::Check::Outcome::kNotClass) return false;
  out_->format = "text";
  if (!c.valid()) Error(c.status, absl::StrCat("text: ", c.status.message()), "", c.offset);
  if (const std::optional<LfsPointer> lfs = ReadLfsPointer(data)) {
    Error(v1::ERROR_CODE_NOT_PRESENT,
          absl::StrCat("a Git LFS pointer, not the file's content (", base::AbslView(lfs->oid),
                       ", ", base::AbslView(lfs->size),
                       "): the content is not present, so nothing was verified; fetch it with "
                       "`git lfs pull` (or check out with LFS) and scan again"),
          "", 0);
  }
  m->member = "(as pickle)";
  m->alternative = true;
  if (MustKeep(m->stream)) {
    if (HasContent(m->stream)) {
      Anomaly("polyglot", m->member, 0,
              "the text is also a pickle that imports or calls something");
    }
    out_->members.push_back(std::move(*m));
  }
  // sentence-transformers' modules.json is a JSON list, which is text here (JSON documents
  // are objects): read as json.load reads it. One that does not parse loads nothing.
  if (c.valid() && options_.file_name == "modules.json") {
    torch::RepoJson repo;
    uint64_t offset = 0;
    if (torch::ReadRepoJson(data, options_.index, &repo, &offset).ok()) {
      SentenceTransformerModules(repo);
    }
  }
  if (c.valid() && (EndsWith(options_.file_name, ".jinja") || StartsLikeJinja(data))) {
    Template(data, "", "chat template", 0, /*in_json=*/false);
  }
  if (c.valid() && torch::IsYamlName(options_.file_name)) YamlDocument(data);
  return true;
}

void Reader::Image(std::string_view data, content::Image image) {
  out_->format = std::string(content::ImageName(image));
  const content::Check c = content::CheckImage(data, image, options_.content);
  if (!c.valid()) {
    Error(c.status, absl::StrCat(out_->format, ": ", c.status.message()), "", c.offset);
  }
}

void Reader::JsonDocument(std::string_view data) {
  torch::RepoJson repo;
  uint64_t offset = 0;
  if (absl::Status s =
          torch::ReadRepoJson(data, options_.index, &repo, &offset, options_.keras_config);
      !s.ok()) {
    Error(s, absl::StrCat("JSON: ", s.message()), "", offset);
    return;
  }
  if (options_.keras_config) {
    if (repo.objects.size() > options_.max_keras_objects) {
      repo.objects.erase(repo.objects.begin() + static_cast<ptrdiff_t>(options_.max_keras_objects),
                         repo.objects.end());
    }
    for (const torch::KerasFinding& k : torch::JudgeKerasObjects(repo.objects)) {
      Anomaly(k.kind, "", k.offset, k.message, /*must_flag=*/true, "keras");
    }
    if (repo.objects_total > repo.objects.size()) {
      const std::string message =
          absl::StrCat("Keras config: ", repo.objects_total, " objects, over the ",
                       options_.max_keras_objects, " judged (max_keras_objects)");
      Error(base::LimitError(message, "max_keras_objects", options_.max_keras_objects), message,
            "", 0);
    }
  }
  if (repo.auto_map_total > 0) {
    RemoteCode("auto_map", "transformers", repo.auto_map, repo.auto_map_total,
               repo.auto_map_offset);
  }
  if (repo.pipelines_total > 0) {
    std::vector<std::pair<std::string, std::string>> refs;
    for (const torch::CustomPipeline& p : repo.pipelines) refs.emplace_back(p.task, p.impl);
    RemoteCode("custom_pipelines", "transformers' pipeline()", refs, repo.pipelines_total,
               repo.pipelines.empty() ? 0 : repo.pipelines[0].offset);
  }
  for (const torch::ConfigTarget& t : repo.targets) {
    std::string where = t.where.empty() ? "at the top level" : absl::StrCat("at ", Esc(t.where));
    if (t.args) absl::StrAppend(&where, ", with _args_");
    if (t.partial) absl::StrAppend(&where, ", _partial_");
    ConfigTarget(t.target, where, t.offset);
  }
  MoreTargets(repo.targets_total - repo.targets.size(), repo.targets_dropped_code,
              torch::kMaxConfigTargets, "kMaxConfigTargets");
  // PEFT (AutoPeftModel.from_pretrained) loads the adapter's base model by this reference: a
  // path on the machine is a model this scan never saw; one in a .git folder is the
  // repository's own, hidden where the walk does not look.
  if (options_.file_name == "adapter_config.json" && repo.has_base_model) {
    if (const std::string_view why = torch::UnscannedPath(repo.base_model);
        why == "in a .git folder") {
      Error(v1::ERROR_CODE_UNSUPPORTED,
            absl::StrCat("the adapter loads its base model from ",
                         base::AbslView(base::Quoted(repo.base_model)), ", ", base::AbslView(why),
                         ", which a repository scan does not read: not verified"),
            "", repo.base_model_offset);
    }
  }
  if (options_.file_name == "adapter_config.json" && repo.has_base_model &&
      torch::IsLocalModelPath(repo.base_model)) {
    Anomaly("outside_reference", "", repo.base_model_offset,
            absl::StrCat("the adapter loads its base model from ",
                         base::AbslView(base::Quoted(repo.base_model)),
                         ", outside what was scanned (PEFT loads it under the adapter: scan it "
                         "too)"),
            /*must_flag=*/true, "repo");
  }
  for (const torch::JsonTemplate& t : repo.templates) {
    Template(t.text, "", absl::StrCat("chat_template \"", base::AbslView(Esc(t.name)), "\""),
             t.offset, /*in_json=*/true);
  }
}

// sentence-transformers' modules.json: each entry's class is imported by name
// (import_from_string) and its load() called with the entry's folder. Its own classes live in
// sentence_transformers.models (and the sparse encoder's models); any other names code. A folder
// the scan does not read (absolute, outside, in .git) leaves the model unverified.
void Reader::SentenceTransformerModules(const torch::RepoJson& repo) {
  static constexpr std::string_view kDataModules[] = {"torch", "numpy", "np",     "joblib",
                                                      "pickle", "dill", "cloudpickle", "yaml",
                                                      "pandas", "keras", "tensorflow"};
  for (const torch::RepoJson::ListModule& m : repo.modules) {
    const std::string_view type = m.type;
    // One class name right below one of its models modules, no dunder.
    bool own = false;
    for (std::string_view prefix :
         {"sentence_transformers.models.", "sentence_transformers.sparse_encoder.models."}) {
      if (type.rfind(prefix, 0) != 0) continue;
      const std::string_view name = type.substr(prefix.size());
      own = !name.empty() && name.find('.') == std::string_view::npos &&
            name.find("__") == std::string_view::npos;
    }
    const std::string_view last = type.substr(type.rfind('.') + 1);
    const bool loader = torch::TargetRunsCode(type) ||
                        std::find(std::begin(kDataModules), std::end(kDataModules), last) !=
                            std::end(kDataModules);
    if (!type.empty() && !own) {
      Anomaly(loader ? "config_code" : "remote_code", "", m.offset,
              absl::StrCat("modules.json names ", base::AbslView(base::Quoted(type)),
                           ": sentence-transformers imports it by name and calls its load() "
                           "with the module's folder",
                           loader ? " (a loader of other files or code: its load() reads them)"
                                  : "; it is not one of sentence-transformers' own modules"),
              /*must_flag=*/true, "repo");
    }
    if (const std::string_view why = torch::UnscannedPath(m.path); !why.empty()) {
      Error(v1::ERROR_CODE_UNSUPPORTED,
            absl::StrCat("modules.json: a module loads from ", base::AbslView(base::Quoted(m.path)),
                         ", ", base::AbslView(why), ", which a repository scan does not read: not verified"),
            "", m.offset);
    }
  }
  if (repo.modules_total > repo.modules.size()) {
    const std::string message = absl::StrCat("modules.json: ", repo.modules_total,
                                             " modules, over the ", repo.modules.size(),
                                             " judged (kMaxAutoMapEntries)");
    Error(v1::ERROR_CODE_UNSUPPORTED, message, "", 0);
  }
}

void Reader::RemoteCode(std::string_view what, std::string_view runner,
                        const std::vector<std::pair<std::string, std::string>>& refs,
                        uint64_t total, uint64_t offset) {
  // get_class_from_dynamic_module: "org/repo--module.Class" is code in that Hub repository.
  std::string own;
  std::string other;
  for (const auto& [key, value] : refs) {
    const std::string entry = key.empty() ? Esc(value) : absl::StrCat(Esc(key), " -> ", Esc(value));
    const std::string_view repo = torch::HubRepoOf(value);
    if (repo.empty()) {
      absl::StrAppend(&own, own.empty() ? "" : ", ", entry);
    } else {
      absl::StrAppend(&other, other.empty() ? "" : ", ", entry, " (from ", Esc(repo), ")");
    }
  }
  std::string message =
      absl::StrCat(base::AbslView(what), " names code that ", base::AbslView(runner),
                   " imports and runs with trust_remote_code=True");
  if (!own.empty()) absl::StrAppend(&message, ": the repository's own: ", own);
  if (!other.empty()) {
    absl::StrAppend(&message, own.empty() ? ": " : "; ",
                    "in another Hub repository, which it downloads from there and runs: ", other);
  }
  if (total > refs.size()) {
    absl::StrAppend(&message, refs.empty() ? ": " : "; and ", total - refs.size(),
                    refs.empty() ? " entries" : " more", " (kMaxAutoMapEntries)");
  }
  Anomaly("remote_code", "", offset, message, /*must_flag=*/true, "repo");
}

void Reader::ConfigTarget(std::string_view target, std::string_view where, uint64_t offset) {
  const bool code = torch::TargetRunsCode(target);
  Anomaly(code ? "config_code" : "config_target", "", offset,
          absl::StrCat("_target_ ", base::AbslView(base::Quoted(target)), " (",
                       base::AbslView(where), "): hydra.utils.instantiate imports it and calls it",
                       code ? ", and it runs code, imports by name, loads other files or touches "
                              "the system"
                            : "; review that its module is code you trust"),
          /*must_flag=*/true, "repo");
}

void Reader::MoreTargets(uint64_t more, uint64_t more_code, uint64_t kept, std::string_view limit) {
  if (more == 0) return;
  Anomaly(more_code > 0 ? "config_code" : "config_target", "", 0,
          absl::StrCat(more, " more _target_ values past the first ", kept, " (",
                       base::AbslView(limit), ")",
                       more_code > 0 ? absl::StrCat(", ", more_code,
                                                    " of them code that runs code or touches "
                                                    "the system")
                                     : ""),
          /*must_flag=*/true, "repo");
}

void Reader::YamlDocument(std::string_view data) {
  const torch::YamlScan scan = torch::ScanYaml(data, options_.yaml);
  if (!scan.status.ok()) {
    Error(scan.status, absl::StrCat("YAML: ", scan.status.message()), "", scan.error_offset);
  }
  for (const torch::YamlTag& t : scan.tags) {
    const std::string seen = t.count > 1 ? absl::StrCat(" (line ", t.line, ", ", t.count, " times)")
                                         : absl::StrCat(" (line ", t.line, ")");
    if (t.python) {
      Anomaly("yaml_python_tag", "", t.offset,
              absl::StrCat("the tag ", base::AbslView(base::Quoted(t.written)), seen,
                           " resolves to ", base::AbslView(base::Quoted(t.resolved)),
                           ": PyYAML's unsafe loaders (yaml.unsafe_load, yaml.load with "
                           "Loader=yaml.Loader or UnsafeLoader) import and build or call it"),
              /*must_flag=*/true, "repo");
    } else {
      Anomaly("yaml_tag", "", t.offset,
              absl::StrCat(
                  "the tag ", base::AbslView(base::Quoted(t.written)), seen,
                  t.resolved.empty()
                      ? std::string(" uses a handle no %TAG directive defines")
                      : absl::StrCat(" resolves to ", base::AbslView(base::Quoted(t.resolved))),
                  ", no standard YAML type: only a loader's own constructor builds it"),
              /*must_flag=*/true, "repo");
    }
  }
  if (scan.more_tags > 0) {
    Anomaly(scan.more_python ? "yaml_python_tag" : "yaml_tag", "", 0,
            absl::StrCat(scan.more_tags, " more tags past the first ", options_.yaml.max_tags,
                         " (--limit max_yaml_tags)",
                         scan.more_python ? ", python/ tags among them" : ""),
            /*must_flag=*/true, "repo");
  }
  for (const torch::YamlTarget& t : scan.targets) {
    ConfigTarget(t.value, absl::StrCat("line ", t.line), t.offset);
  }
  MoreTargets(scan.more_targets, scan.more_code_targets, options_.yaml.max_targets,
              "--limit max_yaml_targets");
}

void Reader::Template(std::string_view text, std::string_view member, std::string_view what,
                      uint64_t offset, bool in_json) {
  if (text.size() > options_.templates.max_template_bytes) {
    const std::string message =
        absl::StrCat(base::AbslView(what), ": a template of ", text.size(), " bytes is over ",
                     options_.templates.max_template_bytes, " (max_template_bytes)");
    Error(base::LimitError(message, "max_template_bytes", options_.templates.max_template_bytes),
          message, member, offset);
    return;
  }
  const content::TemplateCheck check = content::CheckChatTemplate(text, options_.templates);
  if (!check.status.ok()) {
    Error(check.status,
          absl::StrCat(base::AbslView(what), ": the template was not judged: ",
                       check.status.message()),
          member, offset);
  }
  for (const content::TemplateHit& h : check.hits) {
    Anomaly(h.rule, std::string(member), in_json ? offset : offset + h.offset,
            in_json ? absl::StrCat(base::AbslView(what), ", byte ", h.offset, " of the template (",
                                   h.construct, "): ", h.message)
                    : absl::StrCat(base::AbslView(what), " (", h.construct, "): ", h.message),
            /*must_flag=*/true, "template");
  }
  if (check.more_hits > 0) {
    Anomaly(check.more_rule, std::string(member), offset,
            absl::StrCat(base::AbslView(what), ": ", check.more_hits,
                         " more constructs past the first ", check.hits.size()),
            /*must_flag=*/true, "template");
  }
}

}  // namespace ckptscan::formats
