// Language-feature tests. Each expected string was produced by the reference Jinja2 (3.1)
// configured as transformers renders chat templates (ImmutableSandboxedEnvironment, trim_blocks,
// lstrip_blocks, loopcontrols, tojson = json.dumps(ensure_ascii=False)), rendering the same
// template with the same context; they are facts about the reference, not outputs of this engine.
#include "tokenizer/chat/chat_template.h"

#include <gtest/gtest.h>

#include <string>

namespace strata::tokenizer::chat {
namespace {

constexpr const char* kContext =
    R"({"msgs": [{"role": "system", "content": "  sys  "}, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}], "d": {"b": 1, "a": [1, 2.5, null, true], "c": "é\"\n"}, "s": "Hello World", "n": 7, "f": 2.5, "e": "", "none_v": null})";

struct Case {
  const char* tpl;
  const char* expected;
};

// clang-format off
const Case kCases[] = {
    {R"({{ s|upper }}|{{ s|lower }}|{{ 'abc def'|capitalize }}|{{ 'hello wORLD-x'|title }})",
     R"(HELLO WORLD|hello world|Abc def|Hello World-X)"},
    {R"({{ '  x  '|trim }}|{{ s.strip('Hd') }}|{{ '\n\nab\n'.lstrip('\n') }}|{{ 'ab  '.rstrip() }})",
     R"(x|ello Worl|ab
|ab)"},
    {R"({{ d|tojson }})",
     R"({"b": 1, "a": [1, 2.5, null, true], "c": "é\"\n"})"},
    {R"({{ d|tojson(indent=2) }})",
     R"({
  "b": 1,
  "a": [
    1,
    2.5,
    null,
    true
  ],
  "c": "é\"\n"
})"},
    {R"({{ d|tojson(sort_keys=true) }})",
     R"({"a": [1, 2.5, null, true], "b": 1, "c": "é\"\n"})"},
    {R"({{ msgs|length }} {{ s|length }} {{ d|length }} {{ 'é😀'|length }})",
     R"(3 11 3 2)"},
    {R"({{ msgs|map(attribute='role')|join(', ') }})",
     R"(system, user, assistant)"},
    {R"({{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }})",
     R"(['hi'])"},
    {R"({{ msgs|rejectattr('role', 'eq', 'user')|list|length }})",
     R"(2)"},
    {R"({{ [3, 1, 2]|sort|join('-') }} {{ ['b', 'A', 'a']|unique|list }} {{ [1,2,3]|first }} {{ [1,2,3]|last }})",
     R"(1-2-3 ['b', 'A'] 1 3)"},
    {R"({{ s.split(' ') }} {{ 'a  b '.split() }} {{ 'a,b,c'.split(',', 1) }} {{ s.startswith('Hel') }} {{ s.endswith(('x', 'ld')) }})",
     R"(['Hello', 'World'] ['a', 'b'] ['a', 'b,c'] True True)"},
    {R"({{ s.replace('l', 'L') }} {{ s|replace('o', '0', 1) }} {{ s[::-1] }} {{ s[1:4] }} {{ s[-3:] }} {{ msgs[1:]|length }})",
     R"(HeLLo WorLd Hell0 World dlroW olleH ell rld 2)"},
    {R"({{ x|default('dflt') }} {{ e|default('empty', true) }} {{ n|string ~ 'x' }} {{ '42'|int + 1 }} {{ '2.5'|float * 2 }} {{ 3.0|int }})",
     R"(dflt empty 7x 43 5.0 3)"},
    {R"({% for m in msgs %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }};{% endfor %})",
     R"(10TrueFalse33;21FalseFalse32;32FalseTrue31;)"},
    {R"({% for m in [] %}x{% else %}empty{% endfor %})",
     R"(empty)"},
    // An empty sequence times a huge count is empty at once (was a loop of 2^63 appends).
    {R"({{ '' * 9223372036854775807 }}|{{ ([] * 9223372036854775807) | length }}|{{ 'ab' * 0 }})",
     R"(|0|)"},
    {R"({% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for k in d %}{{ k }}{% endfor %}|{% for k, v in d|items %}{{ k }}{% endfor %})",
     R"(b=1;a=[1, 2.5, None, True];c=é"
;|bac|bac)"},
    {R"({% for m in msgs if m.role != 'system' %}{{ m.role }}{{ loop.index }}{{ loop.last }} {% endfor %})",
     R"(user1False assistant2True )"},
    {R"({% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %})",
     R"(0134)"},
    {R"({% set ns = namespace(count=0, found=false) %}{% for m in msgs %}{% set ns.count = ns.count + 1 %}{% if m.role == 'user' %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.count }} {{ ns.found }})",
     R"(3 True)"},
    {R"({% set x = 1 %}{% for i in [1,2] %}{% set x = x + i %}{% endfor %}{{ x }})",
     R"(1)"},
    {R"({% macro greet(name, punct='!') %}Hello {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ greet('b', '?') }} {{ greet(punct='.', name='c') }})",
     R"(Hello a! Hello b? Hello c.)"},
    {R"({% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}inner{% endcall %})",
     R"(<b>inner</b>)"},
    {R"({% if n > 5 and not e %}big{% elif n > 2 %}mid{% else %}small{% endif %} {{ 'yes' if n is odd else 'no' }})",
     R"(big yes)"},
    {R"({{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 8 }} {{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 'ab' * 3 }} {{ 1 ~ 2 }})",
     R"(3 -4 1 2 3.5 256 7 9 ababab 12)"},
    {R"({{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] == [1, 2] }} {{ 'x' in 'xyz' }} {{ 'q' not in d }} {{ 'b' in d }} {{ 2 in [1, 2] }} {{ none_v is none }} {{ f is float }} {{ n is integer }} {{ true is boolean }})",
     R"(True True True True True True True True True True True)"},
    {R"({{ d is mapping }} {{ msgs is iterable }} {{ s is string }} {{ n is number }} {{ x is defined }} {{ x is undefined }} {{ n is divisibleby 7 }} {{ n is even }} {{ s is not none }})",
     R"(True True True True False True True False True)"},
    {R"({{ none_v }} {{ true }} {{ f }} {{ 1.0 }} {{ [1, 'a', none_v] }} {{ {'k': 'v'} }} {{ 1e20 }} {{ 0.1 + 0.2 }})",
     R"(None True 2.5 1.0 [1, 'a', None] {'k': 'v'} 1e+20 0.30000000000000004)"},
    {R"({{ d.get('b') }} {{ d.get('zz', 'dd') }} {{ d.keys()|list }} {{ d['a'][1] }} {{ d.a.1 }} {{ msgs[-1].content }} {{ d.missing is defined }})",
     R"(1 dd ['b', 'a', 'c'] 2.5 2.5 yo False)"},
    {R"({{ 'a\nb\n\nc'|indent(2) }}|{{ 'x\ny'|indent(4, true) }})",
     R"(a
  b

  c|    x
    y)"},
    {R"({{ '%s is %d'|format('n', 7) }} {{ '{} and {}'.format('a', 1) }} {{ '%.2f' % 3.14159 }})",
     R"(n is 7 a and 1 3.14)"},
    {R"({%- for m in msgs -%}
  [{{ m.role }}]
{%- endfor %}
end)",
     R"([system][user][assistant]end)"},
    {R"(<ul>
{% for m in msgs %}
    <li>{{ m.role }}</li>
{% endfor %}
</ul>
)",
     R"(<ul>
    <li>system</li>
    <li>user</li>
    <li>assistant</li>
</ul>)"},
    {R"(a  {%+ if true %}b{% endif %}  
  {# comment #}
  c {{- ' d ' -}} e
{% raw %}{{ not parsed }}{% endraw %})",
     R"(a  b  
  c d e
{{ not parsed }})"},
    {R"({% set greeting %}Hi {{ s }}{% endset %}[{{ greeting }}] {% filter upper %}shout {{ n }}{% endfilter %})",
     R"([Hi Hello World] SHOUT 7)"},
    {R"({{ msgs|selectattr('content')|list|length }} {{ [0, 1, '', 'a']|select|list }} {{ [1, 2, 3]|reject('odd')|list }} {{ [-2, 1]|map('abs')|list }} {{ [1, 2]|sum }} {{ [3, 9, 2]|max }} {{ [3, 9, 2]|min }})",
     R"(3 [1, 'a'] [2] [2, 1] 3 9 2)"},
    {R"({{ 'é'|tojson }} {{ 'é'|tojson(ensure_ascii=true) }} {{ [1, [2, {}], []]|tojson(indent=1) }})",
     R"("é" "\u00e9" [
 1,
 [
  2,
  {}
 ],
 []
])"},
};
// clang-format on

class ChatFeatureTest : public ::testing::TestWithParam<Case> {};

TEST_P(ChatFeatureTest, MatchesReferenceJinja) {
  const Case& c = GetParam();
  auto tpl = ChatTemplate::Parse(c.tpl);
  ASSERT_TRUE(tpl.ok()) << tpl.status().ToString() << "\n" << c.tpl;
  auto ctx = nlohmann::ordered_json::parse(kContext);
  auto out = (*tpl)->Render(ctx);
  ASSERT_TRUE(out.ok()) << out.status().ToString() << "\n" << c.tpl;
  EXPECT_EQ(*out, c.expected) << c.tpl;
}

INSTANTIATE_TEST_SUITE_P(Features, ChatFeatureTest, ::testing::ValuesIn(kCases));

}  // namespace
}  // namespace strata::tokenizer::chat
