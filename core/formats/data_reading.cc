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
#include "core/torch/keras_config.h"
#include "core/torch/legacy.h"
#include "core/torch/numpy.h"
#include "core/torch/repo_json.h"
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
  if (c.valid() && (EndsWith(options_.file_name, ".jinja") || StartsLikeJinja(data))) {
    Template(data, "", "chat template", 0, /*in_json=*/false);
  }
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
    std::string list;
    for (const auto& [key, value] : repo.auto_map) {
      absl::StrAppend(&list, list.empty() ? "" : ", ", base::AbslView(Esc(key)), " -> ",
                      base::AbslView(Esc(value)));
    }
    if (repo.auto_map_total > repo.auto_map.size()) {
      absl::StrAppend(&list, ", and ", repo.auto_map_total - repo.auto_map.size(), " more");
    }
    Anomaly("remote_code", "", repo.auto_map_offset,
            absl::StrCat("auto_map names the repository's own code, which transformers "
                         "imports and runs with trust_remote_code=True: ",
                         list),
            /*must_flag=*/true, "repo");
  }
  for (const torch::JsonTemplate& t : repo.templates) {
    Template(t.text, "", absl::StrCat("chat_template \"", base::AbslView(Esc(t.name)), "\""),
             t.offset, /*in_json=*/true);
  }
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
