"""Whole games of a selfplay HCPE file, for the bench scripts beside this one."""
RECORD = 38  # bytes of one HCPE record


def whole_games(path: str, out: str) -> int:
    """Copies the records of the games listed in `path`.games to `out`; their count."""
    counts = [int(x) for x in open(path + ".games").read().split()]
    n = sum(counts)
    with open(path, "rb") as f:
        data = f.read(n * RECORD)
    if len(data) != n * RECORD:
        raise SystemExit(f"{path}: fewer records than its .games file lists")
    with open(out, "wb") as f:
        f.write(data)
    return n
