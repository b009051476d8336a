"""What the analyzer's Python checks share: a verdict per check, and the summary line."""
failures = []


def check(cond, what):
    print("PASS" if cond else "FAIL", what)
    if not cond:
        failures.append(what)


def finish(name):
    print(f"{name}:", "FAIL" if failures else "PASS", f"({len(failures)} failed)")
    return 1 if failures else 0
