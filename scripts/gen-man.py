#!/usr/bin/env python3
"""Man pages from the docs, so they never disagree with them.

usage: gen-man.py SOURCE_DIR OUT_DIR VERSION
  OUT_DIR/nccl-watchdog-analyze.1  from docs/analyzer.md (usage block, exit codes, job verdict)
  OUT_DIR/nccl-watchdog.7          from docs/configuration.md (every setting, its default)
"""
import os
import re
import sys


def roff(text):
    """Markdown inline text to roff: code and emphasis dropped to plain, backslashes escaped."""
    text = text.replace("\\", "\\e")
    text = re.sub(r"`([^`]*)`", r"\\fB\1\\fR", text)
    text = re.sub(r"\*\*([^*]*)\*\*", r"\\fB\1\\fR", text)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.replace("—", "-").replace("–", "-")
    lines = []
    for line in text.split("\n"):
        if line.startswith((".", "'")):
            line = "\\&" + line
        lines.append(line)
    return "\n".join(lines)


def section(md, title):
    """The body of a '## title' section (up to the next '## ')."""
    m = re.search(r"^## " + re.escape(title) + r"[^\n]*\n(.*?)(?=^## |\Z)", md, re.S | re.M)
    if not m:
        sys.exit("gen-man.py: no section '%s'" % title)
    return m.group(1).strip()


def paragraphs(body):
    """Paragraphs and bullet items of a markdown body, code blocks kept verbatim."""
    out, para, code = [], [], None
    for line in body.split("\n"):
        if line.startswith("```"):
            if code is None:
                if para:
                    out.append(("p", " ".join(para)))
                    para = []
                code = []
            else:
                out.append(("code", "\n".join(code)))
                code = None
            continue
        if code is not None:
            code.append(line)
        elif not line.strip():
            if para:
                out.append(("p", " ".join(para)))
                para = []
        elif line.startswith("- ") or re.match(r"^\d+\. ", line):
            if para:
                out.append(("p", " ".join(para)))
            para = ["\x00" + re.sub(r"^(- |\d+\. )", "", line)]
        else:
            para.append(line.strip())
    if para:
        out.append(("p", " ".join(para)))
    text = []
    for kind, p in out:
        if kind == "code":
            text.append(".PP\n.nf\n" + p.replace("\\", "\\e") + "\n.fi")
        elif p.startswith("\x00"):
            text.append(".IP \\(bu 2\n" + roff(p[1:]))
        elif not p.startswith("|"):
            text.append(".PP\n" + roff(p))
    return "\n".join(text)


def table_rows(body):
    rows = []
    for line in body.split("\n"):
        if line.startswith("|") and not re.match(r"^\|[-| ]+\|$", line):
            rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows[1:]  # without the header


def header(name, sec, version, what):
    return ('.TH %s %s "" "nccl-watchdog %s" "%s"\n.SH NAME\n%s \\- %s\n'
            % (name.upper(), sec, version, "nccl-watchdog", name, what))


def analyzer_page(src, version):
    md = open(os.path.join(src, "docs", "analyzer.md")).read()
    intro = md.split("```")[0].split("\n", 1)[1].strip()
    usage = re.search(r"```\n(nccl-watchdog-analyze .*?)```", md, re.S).group(1)
    lines = usage.rstrip("\n").split("\n")
    out = [header("nccl-watchdog-analyze", 1, version, "name the rank that hung an NCCL job")]
    out.append(".SH SYNOPSIS\n.B nccl-watchdog-analyze\n" + roff(lines[0].split(" ", 1)[1]))
    out.append(".SH DESCRIPTION\n" + paragraphs(intro))
    out.append(".SH OPTIONS")
    for line in lines[1:]:
        m = re.match(r"^  (\S.*?)\s{2,}(.*)$", line)
        if m:
            out.append(".TP\n.B %s\n%s" % (roff(m.group(1)), roff(m.group(2))))
        elif line.strip():
            out.append(roff(line.strip()))
    out.append(".SH JOB VERDICT\n" + paragraphs(section(md, "The job's verdict")))
    out.append(".SH EXIT STATUS")
    for code, meaning in table_rows(section(md, "Exit codes")):
        out.append(".TP\n.B %s\n%s" % (code, roff(meaning)))
    out.append(".SH SEE ALSO\n.BR nccl-watchdog (7);\ndocs/analyzer.md in the source tree.")
    return "\n".join(out) + "\n"


def config_page(src, version):
    md = open(os.path.join(src, "docs", "configuration.md")).read()
    intro = md.split("\n## ")[0].split("\n", 1)[1].strip()
    out = [header("nccl-watchdog", 7, version, "configuration of the NCCL watchdog profiler plugin")]
    out.append(".SH DESCRIPTION\n" + paragraphs(intro))
    out.append(".PP\nLoad the plugin with \\fBNCCL_PROFILER_PLUGIN=watchdog\\fR (or the full path of "
               "libnccl-profiler-watchdog.so).")
    out.append(".SH SOURCES\n" + paragraphs(section(md, "Where settings come from")))
    out.append(".SH BAD VALUES\n" + paragraphs(section(md, "Bad values never stop the job")))
    body = None
    for title in re.findall(r"^## (.*)$", md, re.M):
        if "|" in section(md, title) and "NCCL_WATCHDOG_TIMEOUT" in section(md, title):
            body = section(md, title)
            break
    if body is None:
        sys.exit("gen-man.py: no settings table in docs/configuration.md")
    out.append(".SH ENVIRONMENT")
    for row in table_rows(body):
        if len(row) < 5 or not row[0].startswith("`NCCL_WATCHDOG_"):
            continue
        out.append(".TP\n.B %s\ndefault %s; %s; range %s; a bad value: %s."
                   % (row[0].strip("`"), roff(row[1]), roff(row[2]), roff(row[3]), roff(row[4])))
    out.append(".SH NOTES\n" + paragraphs(body.split("What each setting does:", 1)[-1]))
    out.append(".SH SEE ALSO\n.BR nccl-watchdog-analyze (1);\ndocs/configuration.md in the source tree.")
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    src, out, version = sys.argv[1:]
    os.makedirs(out, exist_ok=True)
    for name, text in (("nccl-watchdog-analyze.1", analyzer_page(src, version)),
                       ("nccl-watchdog.7", config_page(src, version))):
        with open(os.path.join(out, name), "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
