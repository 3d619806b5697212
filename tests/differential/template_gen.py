"""Structure-aware generator of chat templates for tests/differential/template_diff.py.

Three families, each from a seeded random.Random (same seed, same templates):

  benign()   templates assembled from the pieces chat templates in the wild are made of: a
             system message taken out of `messages`, role checks that raise_exception, turns
             wrapped in special tokens (ChatML, Llama 2/3, Mistral, Gemma, Phi), tool
             definitions through tojson, tool calls and tool responses, namespaces that
             collect state across the loop, macros, loop.first/last/index, strftime_now,
             filters (trim, length, selectattr, map, join, dictsort, items, default), string
             methods (strip, split, startswith), slices, whitespace control, comments, raw
             blocks, set blocks, filter blocks, with, call blocks, break/continue and
             {% generation %};
  escape()   constructions that reach attributes outside data, with harmless ends (the
             oracle blocks the first non-data step): dunders by name, subscript, |attr,
             map/selectattr/rejectattr/groupby/sum/sort/unique/min/max attributes; names built
             by ~, +, join, replace, format, %c, slicing, |first/|last, reverse, loop
             accumulations, set blocks, macro output and defaults, caller(), with, for over
             a tuple, (namespace)[k], (x)[a] chains, special tokens as names; str.format
             reached by .format, [..] and |attr;
  mutate()   a template of either family with tokens or characters deleted, doubled,
             swapped or inserted (delimiters, quotes, brackets, keywords), so that the parse
             comparison sees what Jinja refuses as well as what it accepts.

Every template is text only: nothing here imports Jinja or renders anything.
"""
import random

TOKENS = [("<|im_start|>", "<|im_end|>"), ("[INST] ", " [/INST]"),
          ("<|start_header_id|>", "<|end_header_id|>\n\n"), ("<start_of_turn>", "<end_of_turn>\n"),
          ("<|user|>\n", "<|end|>\n"), ("### ", "\n\n")]
ROLES = ["system", "user", "assistant", "tool"]
DUNDERS = ["__class__", "__base__", "__subclasses__", "__globals__", "__init__", "__mro__",
           "__builtins__", "__dict__", "__getattribute__", "__import__"]
ATTR_FILTERS = [("map", "attribute={a}"), ("selectattr", "{a}"), ("rejectattr", "{a}"),
                ("groupby", "{a}"), ("sum", "{a}"), ("sort", "false, false, {a}"),
                ("sort", "attribute={a}"), ("unique", "false, {a}"), ("min", "false, {a}"),
                ("max", "attribute={a}"), ("join", "'', {a}"), ("groupby", "attribute={a}"),
                ("sum", "attribute={a}")]


def ws(rng):
    return rng.choice(["", "-", "", "", "+"])


def stmt(rng, body):
    return "{%" + ws(rng).replace("+", "") + " " + body + " " + rng.choice(["", "-"]) + "%}"


def out(rng, expr):
    return "{{" + rng.choice(["", "-", " ", "- "]) + " " + expr + " " + rng.choice(["", "-"]) + "}}"


def content_expr(rng, m="message"):
    return rng.choice([
        f"{m}['content']", f"{m}.content", f"{m}['content'] | trim", f"{m}.content.strip()",
        f"{m}['content'] | default('')", f"({m}.content or '')", f"{m}.content|string",
        f"{m}['content'].split('</think>')[-1].lstrip('\\n')",
    ])


def benign_piece(rng, depth=0):
    start, end = rng.choice(TOKENS)
    role = rng.choice(["message['role']", "message.role", "message.role|upper",
                       "message['role'] | capitalize"])
    pieces = [
        lambda: stmt(rng, "for message in messages") +
        out(rng, f"'{start}' + {role} + '\\n' + {content_expr(rng)} + '{end}'") +
        stmt(rng, "endfor"),
        lambda: stmt(rng, "if messages[0]['role'] == 'system'") +
        stmt(rng, "set system_message = messages[0]['content']") +
        stmt(rng, "set loop_messages = messages[1:]") + stmt(rng, "else") +
        stmt(rng, "set loop_messages = messages") + stmt(rng, "set system_message = false") +
        stmt(rng, "endif") + stmt(rng, "for message in loop_messages") +
        stmt(rng, "if (message['role'] == 'user') != (loop.index0 % 2 == 0)") +
        out(rng, "raise_exception('Conversation roles must alternate user/assistant')") +
        stmt(rng, "endif") + stmt(rng, "if loop.index0 == 0 and system_message != false") +
        stmt(rng, "set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + "
                  "message['content']") +
        stmt(rng, "else") + stmt(rng, "set content = message['content']") + stmt(rng, "endif") +
        out(rng, "bos_token + '[INST] ' + content.strip() + ' [/INST]'") + stmt(rng, "endfor"),
        lambda: stmt(rng, "set ns = namespace(found=false, last_user=-1)") +
        stmt(rng, "for m in messages") + stmt(rng, "if m.role == 'user'") +
        stmt(rng, "set ns.last_user = loop.index0") + stmt(rng, "endif") +
        stmt(rng, "if m.role == 'tool'") + stmt(rng, "set ns.found = true") + stmt(rng, "endif") +
        stmt(rng, "endfor") + out(rng, "ns.found") + out(rng, "ns.last_user"),
        lambda: stmt(rng, "if tools is defined and tools") + out(rng, "'<tools>'") +
        stmt(rng, "for tool in tools") + out(rng, "tool | tojson" + rng.choice(["", "(indent=4)"])) +
        stmt(rng, "endfor") + out(rng, "'</tools>'") + stmt(rng, "endif"),
        lambda: stmt(rng, "for message in messages") +
        stmt(rng, "if message.tool_calls is defined and message.tool_calls") +
        stmt(rng, "for tool_call in message.tool_calls") +
        stmt(rng, "if tool_call.function is defined") +
        stmt(rng, "set tool_call = tool_call.function") + stmt(rng, "endif") +
        out(rng, "'{\"name\": \"' + tool_call.name + '\", \"arguments\": ' + "
                 "(tool_call.arguments | tojson) + '}'") +
        stmt(rng, "if not loop.last") + out(rng, "','") + stmt(rng, "endif") +
        stmt(rng, "endfor") + stmt(rng, "endif") + stmt(rng, "endfor"),
        lambda: stmt(rng, "set date = strftime_now('%d %b %Y')") + out(rng, "date"),
        lambda: stmt(rng, "if add_generation_prompt") + out(rng, f"'{start}assistant\\n'") +
        stmt(rng, "endif"),
        lambda: out(rng, "messages | selectattr('role', 'equalto', 'user') | list | length"),
        lambda: out(rng, "messages | map(attribute='content') | join('\\n')"),
        lambda: out(rng, "messages | map(attribute='role') | unique | list"),
        lambda: stmt(rng, "for k, v in (tools[0] if tools else {}) | dictsort") +
        out(rng, "k ~ '=' ~ v") + stmt(rng, "endfor"),
        lambda: stmt(rng, "for k, v in messages[0].items()") + out(rng, "k") + stmt(rng, "endfor"),
        lambda: stmt(rng, "macro render(m, prefix='')") + out(rng, "prefix ~ m.role ~ ': ' ~ m.content") +
        stmt(rng, "endmacro") + stmt(rng, "for m in messages") + out(rng, "render(m, '> ')") +
        stmt(rng, "endfor"),
        lambda: "{# " + rng.choice(["a comment", "{{ not code }}", "__class__ in a comment"]) + " #}",
        lambda: stmt(rng, "raw") + "{{ not rendered }}" + stmt(rng, "endraw"),
        lambda: stmt(rng, "set sep") + "\n### " + stmt(rng, "endset") + out(rng, "sep ~ 'x'"),
        lambda: stmt(rng, "filter upper") + "hello " + out(rng, "bos_token") + stmt(rng, "endfilter"),
        lambda: stmt(rng, "with prefix = '<s>'") + out(rng, "prefix") + stmt(rng, "endwith"),
        lambda: stmt(rng, "macro wrap(tag)") + out(rng, "'<' ~ tag ~ '>' ~ caller() ~ '</' ~ tag ~ '>'") +
        stmt(rng, "endmacro") + stmt(rng, "call wrap('b')") + "text" + stmt(rng, "endcall"),
        lambda: stmt(rng, "for m in messages") + stmt(rng, "if loop.index > 3") + stmt(rng, "break") +
        stmt(rng, "endif") + stmt(rng, "if m.role == 'system'") + stmt(rng, "continue") +
        stmt(rng, "endif") + out(rng, "m.content") + stmt(rng, "endfor"),
        lambda: stmt(rng, "for m in messages") + stmt(rng, "if m.role == 'assistant'") +
        stmt(rng, "generation") + out(rng, "m.content + eos_token") + stmt(rng, "endgeneration") +
        stmt(rng, "endif") + stmt(rng, "endfor"),
        lambda: out(rng, "messages[-1]['content'][:20] ~ (messages|last).role"),
        lambda: out(rng, "'%s: %d' | format(messages[0].role, messages | length)"),
        lambda: out(rng, "(messages | first).content.startswith('/')"),
        lambda: stmt(rng, "set c = cycler('a', 'b')") + stmt(rng, "for m in messages") +
        out(rng, "c.next()") + stmt(rng, "endfor"),
        lambda: stmt(rng, "set j = joiner(', ')") + stmt(rng, "for m in messages") +
        out(rng, "j() ~ m.role") + stmt(rng, "endfor"),
        lambda: stmt(rng, "for i in range(3)") + out(rng, "loop.cycle('x', 'y') ~ i") + stmt(rng, "endfor"),
        lambda: out(rng, "{'a': 1, 'b': [1, 2]}['b'][1] + (1 if add_generation_prompt else 2)"),
        lambda: out(rng, "messages | groupby('role') | map(attribute='grouper') | join(',')"),
        lambda: out(rng, "'x' if messages is sequence and messages is not string else 'y'"),
        lambda: out(rng, "messages | rejectattr('role', 'eq', 'system') | map(attribute='content') | first"),
    ]
    return rng.choice(pieces)()


def benign(rng):
    parts = [benign_piece(rng) for _ in range(rng.randint(1, 4))]
    sep = rng.choice(["", "\n", "\n  ", " "])
    return sep.join(parts)


def dunder_chain(rng, n=2):
    return [rng.choice(DUNDERS) for _ in range(n)]


def built_name(rng, name):
    """Expressions (and preceding statements) whose value is the string `name`."""
    i = rng.randint(1, max(1, len(name) - 1))
    a, b = name[:i], name[i:]
    x = "".join("X" if c == "_" else c for c in name)
    choices = [
        ("", f"'{a}' ~ '{b}'"),
        ("", f"'{a}' + '{b}'"),
        ("", f"'{a}' '{b}'"),
        ("", f"['{a}', '{b}'] | join"),
        ("", f"('{x}' | replace('X', '_'))"),
        ("", f"'{x}'.replace('X', '_')"),
        ("", f"'{name[::-1]}' | reverse"),
        ("", f"'{name[::-1]}'[::-1]"),
        ("", f"('z{name}z')[1:-1]"),
        ("", "'%c%c' | format(95, 95) ~ '" + name.strip("_") + "' ~ '%c%c' % (95, 95)"
         if name.startswith("__") and name.endswith("__") else f"'{name}'"),
        (stmt(rng, "set u = (dict(a_b=1) | first)[1]"),
         "u ~ u ~ '" + name.strip("_") + "' ~ u ~ u" if name.startswith("__") else f"'{name}'"),
        (stmt(rng, "set u = 'a_' | last"),
         "[u, u, '" + name.strip("_") + "', u, u] | join" if name.startswith("__") else f"'{name}'"),
        (stmt(rng, f"set n %}}{name}{{% endset"), "n"),
        (stmt(rng, f"macro n() %}}{name}{{% endmacro"), "n()"),
        (stmt(rng, "set ns = namespace(n='')") + stmt(rng, f"for p in {list(name)!r}") +
         stmt(rng, "set ns.n = ns.n ~ p") + stmt(rng, "endfor"), "ns.n"),
        (stmt(rng, f"macro n(v='{name}') %}}{{{{ v }}}}{{% endmacro"), "n()"),
        (stmt(rng, f"with v = '{name}'"), "v"),
        (stmt(rng, f"for v in ('{name}',)"), "v"),
        (stmt(rng, f"set v = '{x}'|replace('X','_')"), "v"),
        ("", f"'{name}'|string|lower"),
        ("", f"('{a}', '{b}')|join"),
    ]
    pre, expr = rng.choice(choices)
    closers = ""
    if "with v" in pre:
        closers = stmt(rng, "endwith")
    elif "for v in" in pre:
        closers = stmt(rng, "endfor")
    return pre, expr, closers


def escape(rng):
    root = rng.choice(["()", "''", "[]", "{}", "messages", "message", "loop", "namespace", "lipsum",
                       "cycler", "joiner", "range", "dict", "x", "raise_exception", "ns"])
    name = rng.choice(DUNDERS + ["format", "format_map", "mro", "popen", "getcwd", "_module"])
    pre, expr, closers = built_name(rng, name)
    style = rng.randrange(12)
    if style == 0:
        body = out(rng, f"{root}.{name}")
    elif style == 1:
        body = out(rng, f"{root}[{expr}]")
    elif style == 2:
        body = out(rng, f"({root})[{expr}]")
    elif style == 3:
        body = out(rng, f"{root} | attr({expr})")
    elif style == 4:
        f, args = rng.choice(ATTR_FILTERS)
        body = out(rng, f"[{root}] | {f}({args.format(a=expr)}) | list")
    elif style == 5:
        a, b = dunder_chain(rng)
        body = out(rng, f"({root})['{a}']['{b}']")
    elif style == 6:
        body = out(rng, f"{root}.{rng.choice(DUNDERS)}.{rng.choice(DUNDERS)}")
    elif style == 7:
        body = out(rng, f"x[{rng.choice(['bos_token', 'eos_token', 'message.role', 'k'])}]")
    elif style == 8:
        body = out(rng, f"'{{0.{rng.choice(DUNDERS)}}}'.format({root})")
    elif style == 9:
        body = out(rng, f"('{{0}}' | attr('format'))({root})")
    elif style == 10:
        body = stmt(rng, f"set f = 'x{{0}}'.format") + out(rng, f"f({root})")
    else:
        body = stmt(rng, f"for x in {root}.{name}") + out(rng, "x") + stmt(rng, "endfor")
    prefix = ""
    if "ns" in root:
        prefix = stmt(rng, "set ns = namespace(a=1)")
    wrapped = pre + prefix + body + closers
    if rng.random() < 0.5:
        wrapped = benign_piece(rng) + wrapped
    if rng.random() < 0.3:
        wrapped = stmt(rng, "for message in messages") + wrapped + stmt(rng, "endfor")
    return wrapped


INSERTS = ["{{", "}}", "{%", "%}", "{#", "#}", "-", "+", "'", '"', "(", ")", "[", "]", "{", "}",
           " if ", " else ", " for ", " in ", " endfor ", " endif ", ",", ".", "|", "~", ":", "=",
           " is ", " not ", "\\", "\n", " recursive ", "{% endif %}", "{% else %}", "{% endfor %}",
           "{% raw %}", "{% endraw %}", " set ", " loop ", "*", "**", "0x", "1_0", "1.", ".5e3"]


def mutate(rng, text):
    for _ in range(rng.randint(1, 3)):
        if not text:
            text = rng.choice(INSERTS)
            continue
        i = rng.randrange(len(text) + 1)
        op = rng.randrange(5)
        if op == 0:
            text = text[:i] + rng.choice(INSERTS) + text[i:]
        elif op == 1:
            j = min(len(text), i + rng.randint(1, 6))
            text = text[:i] + text[j:]
        elif op == 2:
            j = min(len(text), i + rng.randint(1, 12))
            text = text[:j] + text[i:j] + text[j:]
        elif op == 3 and len(text) > 2:
            j = rng.randrange(len(text))
            a, b = sorted((i % len(text), j))
            text = text[:a] + text[b:b + 1] + text[a + 1:b] + text[a:a + 1] + text[b + 1:]
        else:
            text = text[:i] + rng.choice(["{{ x }}", "{% if x %}", "{% endif %}", "{# c #}",
                                         "{% set y = 1 %}", "{%- for a in b -%}"]) + text[i:]
    return text


def generate(seed, count):
    """`count` templates from `seed`: (family, text) pairs."""
    rng = random.Random(seed)
    result = []
    for _ in range(count):
        r = rng.random()
        if r < 0.4:
            result.append(("benign", benign(rng)))
        elif r < 0.7:
            result.append(("escape", escape(rng)))
        else:
            base = benign(rng) if rng.random() < 0.5 else escape(rng)
            result.append(("mutated", mutate(rng, base)))
    return result
