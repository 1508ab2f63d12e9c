"""ListOps tokens and the published TSV form (LRA ``basic_{train,val,test}.tsv``, ``to_string``).

Token ids index VOCAB (parentheses dropped); the TSV ``Source`` is the left-nested pair form, e.g.
``( ( ( [MAX 2 ) 9 ) ] )`` for MAX(2, 9), with header ``Source<TAB>Target`` and CRLF lines.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from data_prep.compact import fail
from data_prep.source_files import open_source
from lra_base.atomic import atomic_output

OPERATORS = ("[MIN", "[MAX", "[MED", "[SM")
VOCAB = ("<pad>", *(str(d) for d in range(10)), *OPERATORS, "]")
TOKEN_IDS = {word: i for i, word in enumerate(VOCAB) if i}  # "<pad>" never appears in a source string
DIGIT_ID, OP_ID, END_ID = TOKEN_IDS["0"], TOKEN_IDS[OPERATORS[0]], TOKEN_IDS["]"]
TSV_HEADER = "Source\tTarget"
TSV_NEWLINE = "\r\n"  # the published files come from csv.writer, whose line terminator is CRLF
TSV_LIMIT = 4 << 30  # bytes per TSV file: 96,000 trees of at most 2,000 tokens stay well below it


def source_strings(tokens: np.ndarray, offsets: np.ndarray) -> list[str]:
    """The published parenthesised form (LRA ``to_string``) of each sequence of token ids."""
    tokens = np.asarray(tokens, np.int64)
    is_op = (tokens >= OP_ID) & (tokens < END_ID)
    is_end = tokens == END_ID
    step = is_op.astype(np.int64) - is_end
    depth_after = np.cumsum(step)
    if np.any(np.diff(offsets) < 1) or np.any(depth_after[offsets[1:] - 1] != 0) or np.any(depth_after < 0):
        raise ValueError("token ids do not form complete ListOps trees")
    depth_before = depth_after - step
    is_arg = ~is_end & (depth_before > 0)
    arity = np.zeros(tokens.size, np.int64)
    for depth in np.unique(depth_before[is_arg]):
        # an argument belongs to the latest operator that opened the depth it sits at
        ops_here = np.flatnonzero(is_op & (depth_after == depth))
        args_here = np.flatnonzero(is_arg & (depth_before == depth))
        arity[ops_here] = np.diff(np.append(np.searchsorted(args_here, ops_here), args_here.size))
    opens = np.where(is_op, arity + 1, 0)
    # ")" closes every argument's pair; "]" also closes its own pair
    closes = is_end.astype(np.int64) + (~is_op & (depth_after > 0))
    width = int(opens.max(initial=0)) + 1
    table = np.array(
        [("( " * o + VOCAB[t] + " )" * c) for c in range(3) for o in range(width) for t in range(len(VOCAB))],
        dtype=object,
    )
    pieces = table[tokens + len(VOCAB) * (opens + width * closes)]
    return [
        " ".join(pieces[a:b].tolist())
        for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)
    ]


def tokenize(source: str) -> list[int]:
    """Token ids of a TSV ``Source`` string; raises ValueError on an unknown token."""
    try:
        return [TOKEN_IDS[word] for word in source.split() if word != "(" and word != ")"]
    except KeyError as e:
        raise ValueError(f"unknown token {e.args[0]!r}") from None


def evaluate(source: str) -> int:
    """Value of a ListOps expression given as a TSV ``Source`` string."""
    return evaluate_ids(tokenize(source))


def evaluate_ids(ids: list[int]) -> int:
    """Value of one ListOps expression given as token ids; ValueError says where it is ill-formed."""
    stack: list[list[int]] = [[]]  # the open operators, each [operator id, argument values...]
    for position, token in enumerate(ids, start=1):
        if len(stack) == 1 and stack[0]:
            raise ValueError(f"token {position} ({VOCAB[token]}) follows a complete expression")
        if token == END_ID:
            if len(stack) == 1:
                raise ValueError(f"token {position} (]) closes no operator")
            op, *args = stack.pop()
            if not args:
                raise ValueError(f"token {position} (]) closes {VOCAB[op]} before any argument")
            ordered = sorted(args)
            mid = (ordered[(len(args) - 1) // 2] + ordered[len(args) // 2]) // 2
            stack[-1].append((min(args), max(args), mid, sum(args) % 10)[op - OP_ID])
        elif token >= OP_ID:
            stack.append([token])
        else:
            stack[-1].append(token - DIGIT_ID)
    if len(stack) > 1:
        raise ValueError(f"{len(stack) - 1} operator(s) never closed")
    if not stack[0]:
        raise ValueError("no expression")
    return stack[0][0]


def write_tsv(
    path: Path, tokens: np.ndarray, offsets: np.ndarray, labels: np.ndarray, chunk: int = 2048
) -> None:
    """Write sequences in the published TSV layout (header, ``Source<TAB>Target``, CRLF lines)."""
    with atomic_output(path, "w") as f:
        f.write(TSV_HEADER + TSV_NEWLINE)
        for a in range(0, labels.size, chunk):
            b = min(a + chunk, labels.size)
            part = source_strings(tokens[offsets[a] : offsets[b]], offsets[a : b + 1] - offsets[a])
            f.writelines(f"{s}\t{y}{TSV_NEWLINE}" for s, y in zip(part, labels[a:b].tolist(), strict=True))


def read_tsv(path: Path, rebuild_cmd: str) -> tuple[list[np.ndarray], np.ndarray]:
    """Token-id sequences and labels of an official ListOps TSV.

    Every row must be a well-formed expression whose value is its Target; a bad row (or byte, or an empty
    file) raises DataError naming the file and line.
    """
    sequences, labels = [], []
    with open_source(path, TSV_LIMIT, "a ListOps TSV file") as f:
        for line_no, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as e:
                raise fail(path, f"line {line_no}: byte {e.start + 1} is not UTF-8 ({e.reason})", rebuild_cmd) from None
            if line_no == 1:
                if line != TSV_HEADER:
                    raise fail(path, f"line 1: header is not {TSV_HEADER!r}", rebuild_cmd)
            elif line:
                ids, label = parse_row(line, line_no, path, rebuild_cmd)
                sequences.append(np.array(ids, np.uint8))
                labels.append(label)
    if not labels:
        raise fail(path, "no rows after the header (an empty split)", rebuild_cmd)
    return sequences, np.array(labels, np.int64)


def parse_row(line: str, line_no: int, path: Path, rebuild_cmd: str) -> tuple[list[int], int]:
    """Token ids and label of one ``Source<TAB>Target`` row, checked by evaluating the expression."""
    fields = line.split("\t")
    if len(fields) != 2 or fields[1] not in VOCAB[DIGIT_ID : DIGIT_ID + 10]:
        raise fail(path, f"line {line_no}: expected 'Source<TAB>Target' with Target 0-9", rebuild_cmd)
    source, label = fields[0], int(fields[1])
    if source.count("(") != source.count(")") or source.count("[") != source.count("]"):
        raise fail(path, f"line {line_no}: unbalanced brackets in Source", rebuild_cmd)
    try:
        ids = tokenize(source)
        value = evaluate_ids(ids)
    except ValueError as e:
        raise fail(path, f"line {line_no}: Source is not a ListOps expression: {e}", rebuild_cmd) from None
    if value != label:
        raise fail(path, f"line {line_no}: Target is {label} but the expression's value is {value}", rebuild_cmd)
    return ids, label
