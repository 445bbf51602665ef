#!/usr/bin/env python3
"""Lists C/C++ functions longer than a threshold and source files over a line limit.

Usage: scripts/long-functions.py [--max-function N] [--max-file N] [PATH...]

PATHs are files or directories (default: the repository's product code). Each
function over N lines (default 150, counting its first through its last line)
prints as `file:line name length`; each file over the file limit (default 1000)
as `file:1 <file> length`. Exits 1 when anything printed, 0 otherwise.

Function extents come from Universal Ctags (`--fields=+ne`, the `end:` field);
lambdas (ctags' `__anon...` names) are left out because they count inside the
function that holds them. Needs `ctags` (Universal Ctags) on PATH.
"""
import argparse
import os
import subprocess
import sys

SOURCE_EXTS = ('.cpp', '.cc', '.cxx', '.c', '.h', '.hpp', '.cu', '.cuh', '.inc')
# Directories that are not product code: build trees, third-party, tests' inputs.
SKIP_DIRS = {'build', '.git', 'third_party', 'external', '__pycache__'}
DEFAULT_ROOTS = ('dialects', 'passes', 'runtime', 'tools', 'python', 'bench')


def source_files(paths):
    for path in paths:
        if os.path.isfile(path):
            yield path
            continue
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith('build'))
            for name in sorted(files):
                if name.endswith(SOURCE_EXTS):
                    yield os.path.join(root, name)


def functions(path):
    """Yields (line, end, name) for each function definition ctags finds in path."""
    out = subprocess.run(
        ['ctags', '--fields=+ne', '--kinds-C++=f', '--kinds-C=f', '--language-force=C++',
         '--sort=no', '-o', '-', path],
        check=True, capture_output=True, text=True).stdout
    for row in out.splitlines():
        cols = row.split('\t')
        name = cols[0]
        fields = dict(c.split(':', 1) for c in cols[3:] if ':' in c)
        if name.startswith('__anon') or 'line' not in fields or 'end' not in fields:
            continue
        scope = next((fields[k] for k in ('class', 'struct', 'namespace') if k in fields), '')
        # Anonymous namespaces show as __anon...; keep only the named parts of the scope.
        scope = '::'.join(p for p in scope.split('::') if not p.startswith('__anon'))
        if 'class' in fields or 'struct' in fields:
            name = scope.rsplit('::', 1)[-1] + '::' + name
        yield int(fields['line']), int(fields['end']), name


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--max-function', type=int, default=150)
    parser.add_argument('--max-file', type=int, default=1000)
    parser.add_argument('paths', nargs='*')
    args = parser.parse_args()
    paths = args.paths
    if not paths:
        repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        paths = [os.path.relpath(os.path.join(repo, d)) for d in DEFAULT_ROOTS]
    found = False
    for path in source_files(paths):
        with open(path, encoding='utf-8', errors='replace') as f:
            lines = sum(1 for _ in f)
        if lines > args.max_file:
            print(f'{path}:1 <file> {lines}')
            found = True
        for line, end, name in functions(path):
            length = end - line + 1
            if length > args.max_function:
                print(f'{path}:{line} {name} {length}')
                found = True
    return 1 if found else 0


if __name__ == '__main__':
    sys.exit(main())
