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

std::vector<std::string> Constructs(const TemplateCheck& c) {
  std::vector<std::string> out;
  for (const TemplateHit& h : c.hits) out.push_back(h.construct);
  return out;
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
// sandbox), with a harmless command.
TEST(TemplateCheckTest, Cve2024_34359PayloadIsFlaggedAtItsOffsets) {
  const std::string t =
      "{% for x in ().__class__.__base__.__subclasses__() %}{% if \"warning\" in x.__name__ %}"
      "{{ x()._module.__builtins__['__import__']('os').popen(\"true\").read() }}{% endif %}{% "
      "endfor %}";
  const TemplateCheck c = Check(t);
  ASSERT_GE(c.hits.size(), 6u);
  EXPECT_EQ(c.hits[0].construct, "dunder");
  EXPECT_EQ(c.hits[0].offset, t.find("__class__"));
  EXPECT_THAT(c.hits[0].message, ::testing::HasSubstr("__class__"));
  for (const char* name :
       {"__base__", "__subclasses__", "__name__", "__builtins__", "'__import__'"}) {
    bool found = false;
    for (const TemplateHit& h : c.hits) found |= h.offset == t.find(name);
    EXPECT_TRUE(found) << name;
  }
  for (size_t i = 1; i < c.hits.size(); ++i) EXPECT_LE(c.hits[i - 1].offset, c.hits[i].offset);
}

TEST(TemplateCheckTest, EscapeGlobalsAreFlaggedWherever) {
  for (const char* g : {"lipsum", "cycler", "joiner", "self", "config", "request", "url_for"}) {
    const std::string t = std::string("{{ ") + g + ".x }}";
    EXPECT_THAT(Constructs(Check(t)), ElementsAre("global_attribute")) << t;
  }
  // A character picked from a global's string form is how '_' is obtained without writing it.
  EXPECT_THAT(Constructs(Check("{{ (lipsum|string)[18] }}")),
              ElementsAre("global_attribute", "string_index"));
  EXPECT_THAT(Constructs(Check("{{ (raise_exception|string|list)[20] }}")),
              ElementsAre("string_index", "string_index"));
  EXPECT_THAT(Constructs(Check("{{ ('%s'|format(raise_exception))[18] }}")),
              ElementsAre("string_index"));
  EXPECT_THAT(Constructs(Check("{{ (raise_exception|pprint)[18:19] }}")),
              ElementsAre("string_index"));
  EXPECT_THAT(Constructs(Check("{% set u = 'x_'[1] %}")), ElementsAre("string_index"));
  // As an attribute of something else, the name is not the global.
  EXPECT_THAT(Check("{{ message.self }}{{ message.config }}").hits, IsEmpty());
}

TEST(TemplateCheckTest, CalledGlobalsOnlyWhenTheirAttributesAreTaken) {
  EXPECT_THAT(Check("{% set ns = namespace(a=1) %}{{ range(3)|list }}{{ dict(a=1) }}").hits,
              IsEmpty());
  EXPECT_THAT(Constructs(Check("{{ namespace.__init__ }}")),
              ElementsAre("global_attribute", "dunder"));
  EXPECT_THAT(Constructs(Check("{{ range [ 'x' ] }}")), ElementsAre("global_attribute"));
}

TEST(TemplateCheckTest, AttrFilterAndEscapedNames) {
  const std::string t = "{{ ()|attr('\\x5f\\x5fclass\\x5f\\x5f') }}";
  const TemplateCheck c = Check(t);
  EXPECT_THAT(Constructs(c),
              ElementsAre("attr_filter", "dunder", "escape", "escape", "escape", "escape"));
  EXPECT_EQ(c.hits[0].offset, t.find("attr"));
  EXPECT_EQ(c.hits[1].offset, t.find('\''));  // the decoded string is "__class__"
  EXPECT_EQ(c.hits[2].offset, t.find("\\x5f"));
  // Every numeric form Python's unicode-escape decodes, and the named one.
  for (const char* s : {"'\\u005f\\u005fclass__'", "'\\U0000005f_class__'", "'\\137\\137class__'",
                        "'\\N{LOW LINE}_globals__'"}) {
    const TemplateCheck e = Check(std::string("{{ x[") + s + "] }}");
    std::vector<std::string> kinds = Constructs(e);
    EXPECT_NE(std::find(kinds.begin(), kinds.end(), "dunder"), kinds.end()) << s;
    EXPECT_NE(std::find(kinds.begin(), kinds.end(), "escape"), kinds.end()) << s;
  }
  // Escapes of letters are obfuscation too; "\n" and "\"" are not.
  EXPECT_THAT(Constructs(Check("{{ '\\x6fs' }}")), ElementsAre("escape"));
  EXPECT_THAT(Check("{{ 'a\\nb\\\"c\\'d\\\\e\\x20' }}").hits, IsEmpty());
}

TEST(TemplateCheckTest, NamesBuiltFromPieces) {
  EXPECT_THAT(Constructs(Check("{{ x[('_' * 2) ~ 'class' ~ '_' * 2] }}")),
              ElementsAre("computed_key", "built_name", "built_name"));
  EXPECT_THAT(Constructs(Check("{{ x['_' + '_cla' + 'ss_' ~ '_'] }}")),
              ElementsAre("computed_key", "built_name", "built_name", "built_name", "built_name"));
  EXPECT_THAT(Constructs(Check("{{ '%c%c' | format(95, 95) ~ 'class' }}")),
              ElementsAre("format_build"));
  EXPECT_THAT(Constructs(Check("{{ '{0:c}'.format(95) }}")),
              ElementsAre("format_build", "format_build"));
  EXPECT_THAT(Constructs(Check("{{ '%-3c' % 95 }}")), ElementsAre("format_build"));
  // A name that only contains an underscore inside is ordinary.
  EXPECT_THAT(Check("{{ 'tool_call' ~ x }}").hits, IsEmpty());
}

// Names assembled from pieces that each look ordinary, used as keys: outside Jinja's sandbox
// x[k] falls back to getattr(x, k). Each of these reaches `<class 'tuple'>` when rendered by
// jinja2 3.1.2's plain Environment (as llama-cpp-python before 0.2.72 rendered GGUF templates),
// with bos_token = "__class__"; none writes "__" in a string or a name.
TEST(TemplateCheckTest, KeysBuiltFromOrdinaryPiecesAreFlaggedWhereTheyAreUsed) {
  const std::vector<std::string> escapes = {
      "{% set u = (dict(a_b=1)|first)[1] %}{% set c = [u,u,'class',u,u]|join %}{{ ()[c] }}",
      "{% set u = (dict(a_b=1)|first)[1] %}{% set c = u~u~'class'~u~u %}{{ x[c] }}",
      "{% set c %}__class__{% endset %}{{ x[c] }}",
      "{% macro c() %}__class__{% endmacro %}{{ x[c()] }}",
      "{% call(c) f() %}{{ x[caller()] }}{% endcall %}",
      "{{ x[bos_token] }}",
      "{{ [x]|map(attribute=bos_token)|list }}",
      "{% set ns = namespace(n='') %}{% for p in ['_','_','class','_','_'] %}"
      "{% set ns.n = ns.n ~ p %}{% endfor %}{{ x[ns.n] }}",
      "{% set c = '%s%sclass%s%s' % (u, u, u, u) %}{{ x[c] }}",
      "{% set c = 'XXclassXX'|replace('X', u) %}{{ x[c] }}",
      "{{ ()[k] }}",
      "{{ x[a][b] }}",
  };
  for (const std::string& t : escapes) {
    const std::vector<std::string> kinds = Constructs(Check(t));
    EXPECT_NE(std::find(kinds.begin(), kinds.end(), "computed_key"), kinds.end()) << t;
  }
  // Computed keys of the kinds benign templates use are not hits.
  EXPECT_THAT(Check("{{ messages[loop.index0 + 1]['role'] }}{{ ['user', 'assistant'][loop.index0 "
                    "% 2] }}{% for key in tool %}{{ tool[key] }}{% endfor %}"
                    "{% set content = bos_token + message['content'] %}{{ content }}"
                    "{{ message['content'][0] }}{{ messages[-1]['content'][:100] }}")
                  .hits,
              IsEmpty());
}

TEST(TemplateCheckTest, ImportsAndDunderNamesOfTheRuntime) {
  EXPECT_THAT(Constructs(Check("{% import 'x.j2' as m %}")), ElementsAre("import"));
  EXPECT_THAT(Constructs(Check("{% from 'x.j2' import m %}")), ElementsAre("import"));
  EXPECT_THAT(Constructs(Check("{% include 'x' %}{% extends 'y' %}")),
              ElementsAre("import", "import"));
  // In an expression, "import" is only a name (a variable).
  EXPECT_THAT(Check("{{ import }}{% set y = x.include %}").hits, IsEmpty());
  EXPECT_THAT(Constructs(Check("{{ self._TemplateReference__context }}")),
              ElementsAre("global_attribute", "dunder"));
}

// Jinja ends a block at "}}" / "%}" only outside strings and brackets; the checker follows it,
// so a closing delimiter inside a string or a dict does not hide what comes after it.
TEST(TemplateCheckTest, DelimitersInsideStringsAndBracketsDoNotEndTheBlock) {
  const std::string t = "{{ '}}' ~ {'a': {'b': 1}} ~ x.__class__ }}";
  const TemplateCheck c = Check(t);
  ASSERT_THAT(Constructs(c), ElementsAre("dunder"));
  EXPECT_EQ(c.hits[0].offset, t.find("__class__"));
  EXPECT_THAT(Constructs(Check("{% set a = '%}' %}{{ x.__globals__ }}")), ElementsAre("dunder"));
  EXPECT_THAT(Constructs(Check("{% set a = \"\\\"%}\" ~ x.__mro__ %}")), ElementsAre("dunder"));
  EXPECT_THAT(Constructs(Check("{{- x.__dict__ -}}{%+ if y.__doc__ +%}{% endif %}")),
              ElementsAre("dunder", "dunder"));
}

TEST(TemplateCheckTest, UnbalancedInputIsReported) {
  EXPECT_THAT(Constructs(Check("{{ x")), ElementsAre("unbalanced"));
  EXPECT_THAT(Constructs(Check("{% if x %}{{ 'abc }}")), ElementsAre("unbalanced"));
  EXPECT_THAT(Constructs(Check("{# no end")), ElementsAre("unbalanced"));
  EXPECT_THAT(Constructs(Check("{{ ( }} x.__class__")), ElementsAre("unbalanced", "dunder"));
  EXPECT_THAT(Constructs(Check("{{ 'a\\")), ElementsAre("unbalanced"));
  // A lone brace at the end is text.
  EXPECT_THAT(Check("text {").hits, IsEmpty());
}

// One example per construct id: each is reported under its own id, and every id the header
// lists is reachable (the fuzz target checks that no hit carries an id outside the list).
TEST(TemplateCheckTest, EveryListedConstructHasAnExample) {
  const std::vector<std::pair<std::string_view, std::string>> examples = {
      {"dunder", "{{ x.__class__ }}"},      {"attr_filter", "{{ x|attr(y) }}"},
      {"global_attribute", "{{ lipsum }}"}, {"import", "{% import 'm' as m %}"},
      {"escape", "{{ '\\x5f' }}"},          {"format_build", "{{ '%c' % 95 }}"},
      {"built_name", "{{ '_' ~ 'a' }}"},    {"string_index", "{{ 'x_'[1] }}"},
      {"computed_key", "{{ x[a ~ b] }}"},   {"unbalanced", "{{ x"},
  };
  std::set<std::string_view> seen;
  for (const auto& [construct, text] : examples) {
    const std::vector<std::string> got = Constructs(Check(text));
    EXPECT_NE(std::find(got.begin(), got.end(), construct), got.end()) << construct << ": " << text;
    seen.insert(construct);
  }
  EXPECT_EQ(seen, std::set<std::string_view>(std::begin(kTemplateConstructs),
                                             std::end(kTemplateConstructs)));
}

// Found by attacking the GGUF reading: each renders <class 'tuple'> or reaches __import__ in
// jinja2 3.1.2's plain Environment.
TEST(TemplateCheckTest, PaddedJoinedAndAdjacentNamesUnderWhitespaceControl) {
  for (const std::string t : {
           "{% set c='class'.center(9,'_') %}{% set k=z[c] %}",
           "{% set c='class'.ljust(7,'_').rjust(9,'_') %}{{ x[c] }}",
           "{%- set c = ['_','_','class','_','_']|join -%}{%- set k = z[c] -%}",
           "{%+ set c = ['_','_','class','_','_']|join +%}{{ z[c] }}",
           "{{ ()['_' '_' 'class' '_' '_'] }}",
           "{%- set c = '_' '_' 'class' '_' '_' -%}{{ ()[c] }}",
       }) {
    const std::vector<std::string> kinds = Constructs(Check(t));
    EXPECT_NE(std::find(kinds.begin(), kinds.end(), "computed_key"), kinds.end()) << t;
  }
}

TEST(TemplateCheckTest, UnclosedNamedEscapesAreLinear) {
  std::string t = "{{ '";
  for (int i = 0; i < 200000; ++i) t += "\\N";
  EXPECT_LE(Check(t).hits.size(), 64u);  // finishes: each escape looks a bounded distance ahead
}

TEST(TemplateCheckTest, HitsAreCappedAndCounted) {
  std::string t;
  for (int i = 0; i < 100; ++i) t += "{{ x.__a__ }}";
  TemplateLimits limits;
  limits.max_hits = 10;
  const TemplateCheck c = Check(t, limits);
  EXPECT_EQ(c.hits.size(), 10u);
  EXPECT_EQ(c.more_hits, 90u);
  EXPECT_EQ(c.hits[9].offset, t.find("__a__") + 9 * std::string("{{ x.__a__ }}").size());
}

TEST(TemplateCheckTest, MessagesAreTerminalSafeAndShort) {
  const std::string t = "{{ x['__\x1b[31m" + std::string(200, 'a') + "'] }}";
  const TemplateCheck c = Check(t);
  ASSERT_THAT(Constructs(c), ElementsAre("dunder"));
  EXPECT_EQ(c.hits[0].message.find('\x1b'), std::string::npos);
  EXPECT_LT(c.hits[0].message.size(), 100u);
}

// Deep nesting of brackets is counted, not recursed into.
TEST(TemplateCheckTest, DeepNestingIsLinear) {
  const std::string t =
      "{{ " + std::string(1 << 20, '(') + " }}" + std::string(1 << 20, ')') + " }}";
  const TemplateCheck c = Check(t);
  EXPECT_THAT(c.hits, IsEmpty());
}

}  // namespace
}  // namespace ckptscan::content
