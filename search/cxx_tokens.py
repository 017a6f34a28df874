"""A C++/CUDA lexer for the static scan: the tokens the compiler sees, with their lines, from raw or preprocessed text.

Translation phases 1-3 as a compiler runs them: backslash-newline splices are joined first (so `cuda\\<newline>Stream`
is one identifier), comments are removed only outside literals (a `//` inside "https://..." hides nothing), string
literals of every form (prefixes, escapes, raw strings `R"d(...)d"`) and character literals are single tokens, and
adjacent string literals are concatenated as the compiler does (`"mma.sync.aligned" ".f16"` is one literal). CUDA's
`<<<` and `>>>` are tokens. `preprocessed_lines` keeps the lines of one file from the output of `gcc -E`, following
its line markers, so a scan can read what a file became after macro expansion.
"""
from __future__ import annotations

import bisect
import dataclasses
import re

ID, NUMBER, STRING, CHAR, PUNCT, DIRECTIVE = "id", "number", "string", "char", "punct", "directive"

_LEXER = re.compile(r"""
    (?P<ws>[ \t\r\f\v]+)
  | (?P<nl>\n)
  | (?P<comment>//[^\n]*|/\*.*?(?:\*/|\Z))
  | (?P<raw>(?:u8|u|U|L)?R"(?P<delim>[^()\\\s"]{0,16})\(.*?\)(?P=delim)")
  | (?P<string>(?:u8|u|U|L)?"(?:[^"\\\n]|\\.)*"?)
  | (?P<char>(?:u8|u|U|L)?'(?:[^'\\\n]|\\.)*'?)
  | (?P<number>\.?\d(?:[eEpP][+-]|[\w.'])*)
  | (?P<id>[A-Za-z_$][\w$]*)
  | (?P<punct><<<|>>>|<<=|>>=|->\*|\.\.\.|::|->|\+\+|--|<<|>>|<=|>=|==|!=|&&|\|\||\#\#|[-+*/%&|^!=<>]=|[^\s\w])
""", re.S | re.X)
_STRING_PREFIX = re.compile(r'^(?:u8|u|U|L)?R?"')


@dataclasses.dataclass(frozen=True)
class Token:
    """One token: its kind (ID, NUMBER, STRING, CHAR, PUNCT or DIRECTIVE), its text and the source line it starts
    on. A STRING token's `text` is the concatenation of the contents of adjacent literals (quotes and prefixes
    removed, escapes kept as written). A DIRECTIVE token is a whole preprocessing directive line, spliced and without
    comments."""

    kind: str
    text: str
    line: int


def splice(text: str) -> tuple[str, list[int]]:
    """Text with backslash-newlines joined, and the spliced offsets where a physical line break was removed (for
    line numbers)."""
    out, removed, pos = [], [], 0
    for match in re.finditer(r"\\\r?\n", text):
        out.append(text[pos:match.start()])
        removed.append(sum(len(part) for part in out))
        pos = match.end()
    out.append(text[pos:])
    return "".join(out), removed


def _literal_body(text: str) -> str:
    """The contents of one string literal token (prefix, quotes and raw delimiters removed)."""
    prefix = _STRING_PREFIX.match(text)
    body = text[prefix.end():] if prefix else text
    if prefix and "R" in prefix.group():
        delim_end = body.find("(")
        body = body[delim_end + 1:len(body) - delim_end - 2]
    elif body.endswith('"'):
        body = body[:-1]
    return body


def tokenize(text: str, first_line: int = 1, line_numbers: list[int] | None = None) -> list[Token]:
    """The tokens of `text` (see the module docstring). Lines count from `first_line`, or come from `line_numbers`
    (the source line of each line of `text`, for text gathered from a preprocessor's output)."""
    spliced, removed = splice(text)
    newlines = [m.start() for m in re.finditer(r"\n", spliced)]

    def line_of(pos: int) -> int:
        index = bisect.bisect_right(newlines, pos - 1)
        if line_numbers is not None:
            return line_numbers[min(index, len(line_numbers) - 1)]
        return first_line + index + bisect.bisect_right(removed, pos)

    tokens: list[Token] = []
    line_start = True      # only whitespace since the last newline: a `#` here starts a directive
    directive: list[str] | None = None
    directive_line = 0
    for match in _LEXER.finditer(spliced):
        kind = match.lastgroup if match.lastgroup != "delim" else "raw"
        value = match.group()
        if kind == "nl":
            if directive is not None:
                tokens.append(Token(DIRECTIVE, re.sub(r"\s+", " ", "".join(directive)).strip(), directive_line))
                directive = None
            line_start = True
            continue
        if directive is not None:
            directive.append(" " if kind in ("ws", "comment") else value)
            continue
        if kind in ("ws", "comment"):
            continue
        if kind == "punct" and value == "#" and line_start:
            directive, directive_line = ["#"], line_of(match.start())
            continue
        line_start = False
        if kind in ("raw", "string"):
            body = _literal_body(value)
            if tokens and tokens[-1].kind == STRING:
                tokens[-1] = Token(STRING, tokens[-1].text + body, tokens[-1].line)
            else:
                tokens.append(Token(STRING, body, line_of(match.start())))
            continue
        tokens.append(Token({"char": CHAR, "number": NUMBER, "id": ID}.get(kind, PUNCT), value, line_of(match.start())))
    if directive is not None:
        tokens.append(Token(DIRECTIVE, re.sub(r"\s+", " ", "".join(directive)).strip(), directive_line))
    return tokens


_LINE_MARKER = re.compile(r'^#\s*(?:line\s+)?(\d+)\s+"((?:[^"\\]|\\.)*)"')


def preprocessed_lines(text: str, source: str) -> tuple[str, list[int]]:
    """The lines of a preprocessor's output (`gcc -E`) that come from the file `source` (as the line markers name
    it), joined, with the source line number of each."""
    kept: list[str] = []
    numbers: list[int] = []
    current, line = None, 0
    for raw in text.split("\n"):
        marker = _LINE_MARKER.match(raw)
        if marker:
            line = int(marker.group(1))
            current = marker.group(2).encode().decode("unicode_escape")
            continue
        if current == source:
            kept.append(raw)
            numbers.append(line)
        line += 1
    return "\n".join(kept), numbers
