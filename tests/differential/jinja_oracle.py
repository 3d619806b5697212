#!/usr/bin/python3
"""The real Jinja, as chat templates meet it, for tests/differential/template_diff.py.

Runs as a child process (one per Jinja release) and reads JSON lines on stdin:

    {"id": N, "template": TEXT, "contexts": [CONTEXT, ...]}

and answers one JSON line per request:

    {"id": N, "version": "3.1.2",
     "compile": {"ok": bool, "error": TYPE, "message": ...},       (transformers' environment)
     "renders": [{"env": "plain"|"sandbox", "context": i, "error": TYPE or null,
                  "names": [[how, receiver type, name], ...],
                  "nondata": [[how, receiver type, name], ...]}, ...]}

Two environments, each with trim_blocks and lstrip_blocks as transformers and
llama-cpp-python set them:
  sandbox  ImmutableSandboxedEnvironment with loopcontrols, the {% generation %} tag, a tojson
           filter and the globals raise_exception and strftime_now (transformers);
  plain    Environment (llama-cpp-python before 0.2.72), the same globals passed in the context.
"compile" is transformers' from_string; a template is rendered only when it compiles.

The recording hook. Every attribute and item a template reaches goes through the
environment's getattr / getitem (Jinja compiles `.x` and `[x]` to them; filters such as map,
selectattr, groupby, sum, sort, unique, min, max, join and attr use them too). Both are
overridden: every string name is recorded, and anything that is not data is blocked before
Python resolves it -- a name starting with "_", str.format / format_map, any attribute of an
object that is not data -- and recorded in "nondata". A blocked value is an inert marker:
attributes, items and calls on it give the marker again, so nothing outside data is ever
called, whatever the template. Calls go through Context.call, which refuses anything but the
functions of the context, data methods, macros and Jinja's own helpers.

Data is what JSON holds (dict, list, str, int, float, bool, None, tuples of them), Jinja's
Undefined, its loop context, namespaces, macros, cyclers and joiners, ranges, the groups of
groupby, and the bound methods of data that the scanner treats as data. Nothing here executes
a template's payload: the escapes the generator writes only ever reach a marker.

Usage: jinja_oracle.py [--jinja-path DIR]   (DIR first on sys.path: another Jinja release)
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jinja-path", default=None)
    args = ap.parse_args()
    if args.jinja_path:
        sys.path.insert(0, args.jinja_path)
    import datetime
    import jinja2
    import jinja2.ext
    import jinja2.nodes
    import jinja2.runtime
    import jinja2.sandbox
    import jinja2.utils

    class Blocked:
        """What a non-data attribute gives: inert, absorbing."""

        def __getattr__(self, name):
            return self

        def __getitem__(self, key):
            return self

        def __call__(self, *a, **k):
            return self

        def __iter__(self):
            return iter(())

        def __str__(self):
            return "<blocked>"

        __repr__ = __str__

        def __bool__(self):
            return False

        def __len__(self):
            return 0

    BLOCKED = Blocked()

    # Bound methods of data the scanner accepts as data (core/jinja/values: DataMethod).
    str_methods = {
        "capitalize", "casefold", "center", "count", "endswith", "expandtabs", "find",
        "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier",
        "islower", "isnumeric", "isprintable", "isspace", "istitle", "isupper", "join",
        "ljust", "lower", "lstrip", "partition", "removeprefix", "removesuffix", "replace",
        "rfind", "rindex", "rjust", "rpartition", "rsplit", "rstrip", "split", "splitlines",
        "startswith", "strip", "swapcase", "title", "upper", "zfill",
        # markupsafe.Markup
        "striptags", "unescape"}
    list_methods = {"append", "clear", "copy", "count", "extend", "index", "insert", "pop",
                    "remove", "reverse", "sort"}
    dict_methods = {"clear", "copy", "get", "items", "keys", "pop", "popitem", "setdefault",
                    "update", "values"}
    num_methods = {"bit_length", "conjugate", "real", "imag", "numerator", "denominator",
                   "is_integer", "as_integer_ratio", "bit_count"}
    loop_attrs = {"index", "index0", "revindex", "revindex0", "first", "last", "length",
                  "depth", "depth0", "previtem", "nextitem", "cycle", "changed"}

    def type_name(obj):
        return type(obj).__name__

    def is_data(v):
        if v is None or isinstance(v, (bool, int, float, str)):
            return True
        if isinstance(v, (list, tuple, dict, range)):
            return True
        return isinstance(v, (jinja2.runtime.Undefined, jinja2.runtime.LoopContext,
                              jinja2.utils.Namespace, jinja2.runtime.Macro,
                              jinja2.utils.Cycler, jinja2.utils.Joiner))

    def data_method(obj, name, value):
        if not callable(value) or getattr(value, "__self__", None) is not obj:
            return False
        if isinstance(obj, str):
            return name in str_methods
        if isinstance(obj, list):
            return name in list_methods
        if isinstance(obj, dict):
            return name in dict_methods
        if isinstance(obj, (int, float)):
            return name in num_methods
        if isinstance(obj, tuple):
            return name in {"count", "index"}
        if isinstance(obj, jinja2.runtime.LoopContext):
            return name in {"cycle", "changed"}
        if isinstance(obj, (jinja2.utils.Cycler,)):
            return name in {"next", "reset"}
        return False

    def allowed(obj, name, value):
        """Whether reaching `value` as obj.<name> / obj[name] stays in data."""
        if isinstance(value, jinja2.runtime.Undefined):
            return True
        if isinstance(obj, jinja2.runtime.LoopContext):
            return name in loop_attrs
        if isinstance(obj, jinja2.runtime.Macro):
            return name in {"name", "arguments", "catch_kwargs", "catch_varargs", "caller"}
        if isinstance(obj, jinja2.utils.Cycler):
            return name in {"next", "reset", "current"}
        if isinstance(obj, range):
            return name in {"start", "stop", "step", "count", "index"}
        if data_method(obj, name, value):
            return True
        if not is_data(obj):
            return False
        return is_data(value) and not callable(value) or isinstance(
            value, (jinja2.runtime.Macro,))

    def is_format_wrapper(f):
        # SandboxedEnvironment.wrap_str_format: the sandbox's own str.format (3.1.5 and later,
        # and Debian's 3.1.2 with the CVE-2024-56326 fix).
        inner = getattr(f, "__wrapped__", None)
        return (inner is not None and isinstance(getattr(inner, "__self__", None), str)
                and getattr(inner, "__name__", "") in ("format", "format_map"))

    def make_env(base, sandbox):
        class Recording(base):
            def getattr(self, obj, attribute):
                return self._reach("getattr", obj, attribute,
                                   lambda: base.getattr(self, obj, attribute))

            def getitem(self, obj, argument):
                return self._reach("getitem", obj, argument,
                                   lambda: base.getitem(self, obj, argument))

            def _reach(self, how, obj, name, resolve):
                log = getattr(self, "log", None)
                if isinstance(obj, Blocked):
                    return BLOCKED
                if not isinstance(name, str):
                    return resolve()
                if log is not None:
                    log["names"].append([how, type_name(obj), name])
                if (name.startswith("_") and not name.startswith("__")
                        and isinstance(obj, (str, int, float, list, tuple, dict, type(None)))):
                    # Plain data has no attributes named _x: the lookup gives Undefined.
                    value = resolve()
                    if isinstance(value, jinja2.runtime.Undefined):
                        if log is not None:
                            log["names"].append([how, type_name(obj), name])
                        return value
                if name.startswith("_") or name in ("format", "format_map") and isinstance(
                        obj, str):
                    if sandbox:
                        value = resolve()  # the sandbox blocks it or wraps str.format
                        if isinstance(value, jinja2.runtime.Undefined) or name in (
                                "format", "format_map"):
                            return value
                    if log is not None:
                        log["nondata"].append([how, type_name(obj), name])
                    return BLOCKED
                value = resolve()
                if not allowed(obj, name, value):
                    if log is not None:
                        log["nondata"].append([how, type_name(obj), name])
                    return BLOCKED
                return value

        class RecordingContext(jinja2.runtime.Context):
            def call(__self, __obj, *args, **kwargs):  # noqa: N805
                if isinstance(__obj, Blocked):
                    return BLOCKED
                # Calling an Undefined raises UndefinedError, calling data TypeError: nothing
                # is reached.
                ok = (not callable(__obj) or isinstance(__obj, (jinja2.runtime.Macro, jinja2.runtime.LoopContext,
                                         jinja2.utils.Joiner, jinja2.runtime.Undefined))
                      or __obj in SAFE_CALLABLES
                      # the {% generation %} tag's own helper (transformers' extension)
                      or isinstance(getattr(__obj, "__self__", None), AssistantTracker)
                      or (getattr(__obj, "__self__", None) is not None
                          and data_method(__obj.__self__, getattr(__obj, "__name__", ""),
                                          __obj))
                      or (sandbox and is_format_wrapper(__obj)))
                if not ok:
                    log = getattr(__self.environment, "log", None)
                    if log is not None:
                        log["nondata"].append(["call", type_name(__obj),
                                               getattr(__obj, "__name__", "?")])
                    return BLOCKED
                return super().call(__obj, *args, **kwargs)

        Recording.context_class = RecordingContext
        return Recording

    class AssistantTracker(jinja2.ext.Extension):
        """transformers' {% generation %} tag: its body renders unchanged."""
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [],
                                          body).set_lineno(lineno)

        def _generation_support(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def strftime_now(fmt):
        return datetime.datetime(2024, 7, 1, 12, 0, 0).strftime(fmt)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys, default=str)

    SAFE_CALLABLES = [raise_exception, strftime_now, range, dict, jinja2.utils.Namespace,
                      jinja2.utils.Cycler, jinja2.utils.Joiner,
                      jinja2.utils.generate_lorem_ipsum, jinja2.sandbox.safe_range]

    sandbox_env = make_env(jinja2.sandbox.ImmutableSandboxedEnvironment, True)(
        trim_blocks=True, lstrip_blocks=True,
        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    sandbox_env.filters["tojson"] = tojson
    sandbox_env.globals["raise_exception"] = raise_exception
    sandbox_env.globals["strftime_now"] = strftime_now
    plain_env = make_env(jinja2.Environment, False)(
        loader=jinja2.BaseLoader(), trim_blocks=True, lstrip_blocks=True)

    def compile_in(env, text):
        env.log = None
        try:
            return env.from_string(text), None
        except RecursionError as e:
            return None, {"error": "RecursionError", "message": str(e)[:200]}
        except MemoryError as e:
            return None, {"error": "MemoryError", "message": str(e)[:200]}
        except Exception as e:  # TemplateSyntaxError, TemplateAssertionError, SyntaxError
            return None, {"error": type(e).__name__, "message": str(e)[:200]}

    def render(env, template, context):
        log = {"names": [], "nondata": []}
        env.log = log
        error = None
        try:
            template.render(**context)
        except RecursionError:
            error = "RecursionError"
        except Exception as e:
            error = type(e).__name__
        env.log = None
        return log, error

    out = sys.stdout
    for line in sys.stdin:
        req = json.loads(line)
        text = req["template"]
        result = {"id": req["id"], "version": jinja2.__version__}
        compiled, err = compile_in(sandbox_env, text)
        result["compile"] = {"ok": compiled is not None}
        if err:
            result["compile"].update(err)
        renders = []
        if compiled is not None and req.get("contexts"):
            plain_compiled, _ = compile_in(plain_env, text)
            for i, ctx in enumerate(req["contexts"]):
                for name, env, tpl, extra in (
                        ("sandbox", sandbox_env, compiled, {}),
                        ("plain", plain_env, plain_compiled,
                         {"raise_exception": raise_exception, "strftime_now": strftime_now})):
                    if tpl is None:
                        continue
                    c = dict(ctx)
                    c.update(extra)
                    log, error = render(env, tpl, c)
                    renders.append({"env": name, "context": i, "error": error,
                                    "names": log["names"][:2000],
                                    "nondata": log["nondata"][:200]})
        result["renders"] = renders
        out.write(json.dumps(result) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
