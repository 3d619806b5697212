#include "core/content/template_check.h"

#include <algorithm>
#include <iterator>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ckptscan::content {
namespace {

using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::IsEmpty;

TemplateCheck Check(std::string_view text, TemplateLimits limits = {}) {
  return CheckChatTemplate(text, limits);
}

// The worst rule among a check's hits: "" (none), kTemplateUnverified/kTemplateSyntax, or
// kTemplateEscape.
std::string Worst(const TemplateCheck& c) {
  std::string worst;
  for (const TemplateHit& h : c.hits) {
    if (h.rule == kTemplateEscape) return std::string(kTemplateEscape);
    worst = h.rule;
  }
  return worst;
}

bool HasHit(const TemplateCheck& c, std::string_view construct, uint64_t offset) {
  for (const TemplateHit& h : c.hits) {
    if (h.construct == construct && h.offset == offset) return true;
  }
  return false;
}


// Templates in the shapes real models ship (ChatML, Llama 2, Zephyr, Llama 3 with tools): the
// constructs they use (namespace(), loop, raise_exception, strftime_now, tojson, whitespace
// control, string concatenation) are not hits.
TEST(TemplateCheckTest, BenignTemplatesHaveNoHits) {
  const std::vector<std::string> benign = {
      // ChatML
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
      "message['content'] + "
      "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
      "'<|im_start|>assistant\\n' }}"
      "{% endif %}",
      // Llama 2
      "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
      "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages "
      "%}"
      "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
      "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
      "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
      "{% endif %}{% if loop.index0 == 0 and system_message != false %}"
      "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
      "{% else %}{% set content = message['content'] %}{% endif %}"
      "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
      "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% "
      "endif %}"
      "{% endfor %}",
      // Zephyr
      "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\\n' + "
      "message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ "
      "'<|system|>\\n' + "
      "message['content'] + eos_token }}\n{% endif %}\n{% if loop.last and add_generation_prompt "
      "%}\n"
      "{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}",
      // Llama 3.1 style, with tools and a namespace
      "{{- bos_token }}\n{%- if not date_string is defined %}{%- set date_string = "
      "strftime_now(\"%d %b %Y\") %}"
      "{%- endif %}\n{%- set ns = namespace(found=false, tools_in_user=true) %}\n"
      "{%- for message in messages %}{%- if message.role == 'tool' %}{%- set ns.found = true %}{%- "
      "endif %}"
      "{%- endfor %}\n{%- if tools is not none %}{%- for t in tools %}{{- t | tojson(indent=4) }}"
      "{{- \"\\n\\n\" }}{%- endfor %}{%- endif %}\n"
      "{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + "
      "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}"
      "{%- if message.tool_calls is defined %}{%- for tool_call in message.tool_calls %}"
      "{{- '{\"name\": \"' + tool_call.function.name + '\", ' }}{{- '\"parameters\": ' }}"
      "{{- tool_call.function.arguments | tojson }}{{- \"}\" }}{%- endfor %}{%- endif %}{%- endfor "
      "%}\n"
      "{# a comment with __class__ and {{ lipsum }} is not code #}"
      "{%- for i in range(3) %}{{ {'a': {'b': i}}['a']['b'] }}{%- endfor %}"
      "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
      "{%- endif %}",
      // Text outside blocks is not code.
      "Say __class__ and lipsum.__globals__ {not a block} % } { x",
      // %% and a percent sign are not conversions; %s formatting is ordinary.
      "{{ '%d%% done, %s' | format(3, name) }}",
  };
  for (const std::string& t : benign) {
    const TemplateCheck c = Check(t);
    EXPECT_THAT(c.hits, IsEmpty()) << t << "\nfirst: " << (c.hits.empty() ? "" : c.hits[0].message);
    EXPECT_EQ(c.more_hits, 0u);
  }
}

// The payload of CVE-2024-34359 (llama-cpp-python rendered GGUF chat templates without a
// sandbox), with a harmless command: DANGEROUS at the first dunder, for the plain Environment.
TEST(TemplateCheckTest, Cve2024_34359PayloadIsDangerousAtItsFirstDunder) {
  const std::string t =
      "{% for x in ().__class__.__base__.__subclasses__() %}{% if \"warning\" in x.__name__ %}"
      "{{ x()._module.__builtins__['__import__']('os').popen(\"true\").read() }}{% endif %}{% "
      "endfor %}";
  const TemplateCheck c = Check(t);
  ASSERT_TRUE(c.status.ok());
  EXPECT_EQ(Worst(c), kTemplateEscape);
  EXPECT_TRUE(HasHit(c, "private_name", t.find("__class__"))) << c.hits[0].offset;
  EXPECT_THAT(c.hits[0].message, ::testing::HasSubstr("__class__"));
  EXPECT_THAT(c.hits[0].message, ::testing::HasSubstr("plain Environment"));
}

// The constructions that escaped the pattern checker (SAFE on 53c603a), each reaching a dunder
// under a plain Environment by a name the template builds.
struct Escape {
  const char* name;
  const char* text;
};
class BuiltNameEscapeTest : public ::testing::TestWithParam<Escape> {};

TEST_P(BuiltNameEscapeTest, IsDangerous) {
  const TemplateCheck c = Check(GetParam().text);
  ASSERT_TRUE(c.status.ok()) << c.status;
  EXPECT_EQ(Worst(c), kTemplateEscape) << GetParam().text;
  bool dunder = false;
  for (const TemplateHit& h : c.hits) dunder |= h.message.find("'__") != std::string::npos;
  EXPECT_TRUE(dunder) << GetParam().text;
}

INSTANTIATE_TEST_SUITE_P(
    Constructions, BuiltNameEscapeTest,
    ::testing::Values(
        Escape{"ForLoopAccumulation",
               "{% set ns = namespace(n='') %}{% for c in ['_','_','c','l','a','s','s','_','_'] "
               "%}{% set ns.n = ns.n ~ c %}{% endfor %}{{ messages[ns.n] }}"},
        Escape{"FirstAndLastOfLiterals",
               "{{ messages[('_x'|first) ~ ('x_'|last) ~ 'class__'] }}"},
        Escape{"NamespaceSubscript",
               "{% set ns = namespace(k='XXclassXX'|replace('X','_')) %}"
               "{{ messages[(ns)['k']] }}"},
        Escape{"OneLookupPerLoopVariable",
               "{% for a in ['__class__'] %}{% for b in ['__init__'] %}{{ x[a][b] }}"
               "{% endfor %}{% endfor %}"},
        Escape{"ReplaceInlineInMapAttribute",
               "{{ messages|map(attribute='XXinitXX'|replace('X','_'))|list }}"},
        Escape{"ReplaceParenthesisedInMapAttribute",
               "{{ messages|map(attribute=('XXinitXX'|replace('X','_')))|list }}"},
        Escape{"GroupbyPositional", "{{ messages|groupby('XXclassXX'|replace('X','_'))|list }}"},
        Escape{"SumPositional", "{{ messages|sum('XXclassXX'|replace('X','_')) }}"},
        Escape{"SelectattrPositional",
               "{{ messages|selectattr('XXclassXX'|replace('X','_'))|list }}"},
        Escape{"SortPositional", "{{ messages|sort(false, false, '__class__')|list }}"},
        Escape{"UniquePositional", "{{ messages|unique(false, '_' '_class__')|list }}"},
        Escape{"MaxAttribute", "{{ messages|max(attribute='__class__') }}"},
        Escape{"WithBinding",
               "{% with n = 'XXclassXX'|replace('X','_') %}{{ messages[n] }}{% endwith %}"},
        Escape{"ForOverTuple",
               "{% for n in ('XXclassXX'|replace('X','_'),) %}{{ messages[n] }}{% endfor %}"},
        Escape{"MacroParameterDefault",
               "{% macro m(n='XXclassXX'|replace('X','_')) %}{{ messages[n] }}{% endmacro %}"
               "{{ m() }}"},
        Escape{"ParenthesisedChain",
               "{% set a = 'XXclassXX'|replace('X','_') %}{{ (messages)[a][a] }}"},
        Escape{"ReversedLiteral", "{{ messages['__ssalc__'|reverse] }}"},
        Escape{"SetBlock", "{% set n %}__class__{% endset %}{{ messages[n] }}"},
        Escape{"UndefinedReceiver", "{{ loop.__class__ }}"},
        // Found by attacking the reader: a name stored by dict.update, read back by attribute.
        Escape{"DictUpdateValue",
               "{% set d = {} %}{% set _ = d.update({'a': '__class__'}) %}{{ messages[d.a] }}"},
        Escape{"DictUpdatePairs",
               "{% set d = {} %}{% set _ = d.update([('a', '__class__')]) %}"
               "{{ messages[d['a']] }}"},
        Escape{"ListAppend",
               "{% set l = [] %}{% set _ = l.append('__class__') %}{{ messages[l[0]] }}"},
        Escape{"CallerOutput",
               "{% macro m() %}{{ caller() }}{% endmacro %}{% set n %}{% call m() %}__class__"
               "{% endcall %}{% endset %}{{ messages[n] }}"},
        Escape{"FilteredSetBlock",
               "{% set n | replace('X', '_') %}XXclassXX{% endset %}{{ messages[n] }}"},
        Escape{"MapAttrFilterByName", "{{ messages|map('attr', '__class__')|list }}"},
        Escape{"KeywordNameOfDict", "{{ messages[dict(__class__=1)|first] }}"}),
    [](const ::testing::TestParamInfo<Escape>& i) { return std::string(i.param.name); });

// transformers' sandbox: str.format reached through |attr (CVE-2025-27516) or stored and
// called later (CVE-2024-56326) is DANGEROUS for the sandbox too; called in place, the sandbox
// formats with its own checks.
TEST(TemplateCheckTest, FormatThroughAttrFilterIsDangerousInTheSandbox) {
  const TemplateCheck c = Check("{{ ('{0.__class__}'|attr('format'))(messages) }}");
  ASSERT_FALSE(c.hits.empty());
  EXPECT_EQ(c.hits[0].construct, "format_method");
  EXPECT_EQ(c.hits[0].rule, kTemplateEscape);
  EXPECT_THAT(c.hits[0].message, ::testing::HasSubstr("CVE-2025-27516"));
  EXPECT_THAT(c.hits[0].message, ::testing::HasSubstr("sandbox"));
}

TEST(TemplateCheckTest, StoredFormatReferenceIsDangerousInTheSandbox) {
  const TemplateCheck c = Check("{% set f = '{0.__class__}'.format %}{{ f(messages) }}");
  ASSERT_FALSE(c.hits.empty());
  EXPECT_EQ(c.hits[0].construct, "format_method");
  EXPECT_THAT(c.hits[0].message, ::testing::HasSubstr("CVE-2024-56326"));
}

TEST(TemplateCheckTest, FormatCalledInPlaceWithPlainFieldsConcernsThePlainEnvironmentOnly) {
  const TemplateCheck c = Check("{{ '{0} {1}'.format(messages, tools) }}");
  ASSERT_EQ(c.hits.size(), 1u);
  EXPECT_EQ(c.hits[0].rule, kTemplateEscape);
  EXPECT_THAT(c.hits[0].message, ::testing::HasSubstr("llama-cpp-python"));
}

// Found by the differential (seed 7): the sandbox's own format looks fields up through its
// getattr, whose item fallback turns dict['__x__'] into a typing alias: not SAFE there.
TEST(TemplateCheckTest, FormatFieldsWithAttributesAreNotSafeInTheSandbox) {
  const TemplateCheck c = Check("{{ '{0.__getattribute_attribute__}'.format(dict) }}");
  bool sandbox = false;
  for (const TemplateHit& h : c.hits) {
    sandbox |= h.message.find("[transformers' sandbox]") == 0 && h.rule == kTemplateUnverified;
  }
  EXPECT_TRUE(sandbox);
}

// Found by the differential (seed 5): a built name as an item of a class is a typing alias in
// the sandbox, not data.
TEST(TemplateCheckTest, BuiltItemOfAClassIsNotSafeInTheSandbox) {
  const TemplateCheck c = Check("{{ (dict)[['u', 'u', 'class', 'u', undefined_name] | join] }}");
  bool sandbox = false;
  for (const TemplateHit& h : c.hits) {
    sandbox |= h.message.find("[transformers' sandbox]") == 0;
  }
  EXPECT_TRUE(sandbox);
}

TEST(TemplateCheckTest, SpecialTokensAsNamesAreDangerous) {
  const std::string t = "{{ messages[bos_token] }}";
  const TemplateCheck c = Check(t);
  EXPECT_EQ(Worst(c), kTemplateEscape);
  ASSERT_FALSE(c.hits.empty());
  EXPECT_EQ(c.hits[0].construct, "built_name");
}

TEST(TemplateCheckTest, ImportsAreNotJudgedAsSafe) {
  for (const char* t : {"{% include 'other.jinja' %}", "{% import 'm.jinja' as m %}",
                        "{% from 'm.jinja' import x %}", "{% extends 'base.jinja' %}"}) {
    const TemplateCheck c = Check(t);
    EXPECT_FALSE(c.hits.empty()) << t;
  }
}

TEST(TemplateCheckTest, SyntaxErrorsAreReportedNeverSafe) {
  for (const char* t : {"{{ x }", "{% for x in y %}", "{{ 'open }}", "{# open", "{% endif %}"}) {
    const TemplateCheck c = Check(t);
    ASSERT_EQ(c.hits.size(), 1u) << t;
    EXPECT_EQ(c.hits[0].construct, "syntax") << t;
    EXPECT_EQ(c.hits[0].rule, kTemplateSyntax) << t;
  }
}

TEST(TemplateCheckTest, DelimitersInsideStringsDoNotEndTheBlock) {
  const TemplateCheck c = Check("{{ '}}' ~ \"%}\" ~ messages[0]['content'] }}{% if '{%' %}{% endif %}");
  EXPECT_THAT(c.hits, IsEmpty()) << (c.hits.empty() ? "" : c.hits[0].message);
}

TEST(TemplateCheckTest, DeepBracketsStopAtTheNamedLimit) {
  const std::string t = "{{ " + std::string(100000, '(') + "x" + std::string(100000, ')') + " }}";
  const TemplateCheck c = Check(t);
  EXPECT_EQ(c.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(c.status.message(), ::testing::HasSubstr("nested"));
}

TEST(TemplateCheckTest, DeepStatementsStopAtTheNamedLimit) {
  std::string t;
  for (int i = 0; i < 20000; ++i) t += "{% if x %}";
  const TemplateCheck c = Check(t);
  EXPECT_EQ(c.status.code(), absl::StatusCode::kResourceExhausted);
}

TEST(TemplateCheckTest, LongFilterChainsAreRead) {
  std::string t = "{{ messages";
  for (int i = 0; i < 20000; ++i) t += "|first";
  t += " }}";
  const TemplateCheck c = Check(t);
  EXPECT_TRUE(c.status.ok()) << c.status;
}

TEST(TemplateCheckTest, EvaluationStepsAreBounded) {
  TemplateLimits limits;
  limits.reader.max_eval_steps = 10;
  const TemplateCheck c = Check(
      "{% for m in messages %}{% for n in messages %}{{ m.content ~ n.content }}{% endfor %}"
      "{% endfor %}",
      limits);
  EXPECT_EQ(c.status.code(), absl::StatusCode::kResourceExhausted);
}

TEST(TemplateCheckTest, HitsAreCappedAndCountedDangerousFirst) {
  std::string t;
  for (int i = 0; i < 100; ++i) t += "{{ dict.x" + std::to_string(i) + " }}";
  t += "{{ ().__class__ }}";
  TemplateLimits limits;
  limits.max_hits = 8;
  const TemplateCheck c = Check(t, limits);
  ASSERT_EQ(c.hits.size(), 8u);
  EXPECT_GT(c.more_hits, 0u);
  EXPECT_EQ(Worst(c), kTemplateEscape);
}

TEST(TemplateCheckTest, MessagesAreTerminalSafeAndShort) {
  const std::string t = "{{ messages['\\x1b[31m" + std::string(500, 'a') + "'].__class__ }}";
  const TemplateCheck c = Check(t);
  ASSERT_FALSE(c.hits.empty());
  for (const TemplateHit& h : c.hits) {
    EXPECT_EQ(h.message.find('\x1b'), std::string::npos);
    EXPECT_LT(h.message.size(), 400u) << h.message;
  }
}

TEST(TemplateCheckTest, EveryHitNamesAListedConstruct) {
  const std::set<std::string_view> listed(std::begin(kTemplateConstructs),
                                          std::end(kTemplateConstructs));
  for (const char* t : {"{{ ().__class__ }}", "{{ ''|attr('format') }}", "{{ x|nosuch }}",
                        "{{ x is nosuch }}", "{% include 'x' %}", "{{ x }", "{{ dict.x }}",
                        "{{ messages[messages[0].content] }}", "{{ messages[bos_token] }}"}) {
    for (const TemplateHit& h : Check(t).hits) {
      EXPECT_TRUE(listed.count(h.construct) > 0) << t << ": " << h.construct;
    }
  }
}

}  // namespace
}  // namespace ckptscan::content
