#!/usr/bin/env bash
# TEST ONLY: build the stand-ins for the Windows system functions Wine 8 lacks, for
# packaging/test_windows.sh. They go into the test's Wine prefix (C:\windows\system32),
# never into the installer.
#
#   ucrtbase.dll          the C99 complex-math functions numpy 2 calls (stubs in Wine 8's
#                         ucrtbase: crealf, cexp, cpow, ...), every other export forwarded
#   ucrtwine.dll          to this: Wine's own ucrtbase.dll, renamed, its "Wine builtin
#                         DLL" mark cleared so that Wine loads it as an ordinary DLL
#   bcryptprimitives.dll  ProcessPrng (Rust >= 1.78's random numbers; Wine 9 has it)
#   icuuc.dll             the ICU converter functions Qt6Core imports (none converts)
# Not stand-ins, set by the test instead: KMP_AFFINITY=disabled (torch's OpenMP calls
# GetNumaNodeProcessorMaskEx, which Wine 8 lacks) and Microsoft's msvcp140 family as
# native overrides (the installer ships them; Wine's own msvcp140 deadlocks in
# onnxruntime-genai).
#
# Usage: bash packaging/windows/wine/build_stubs.sh OUT_DIR
# Needs: gcc-mingw-w64-x86-64, wine64 (for its ucrtbase.dll), python3.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(realpath -m "${1:?usage: $0 OUT_DIR}")
mkdir -p "$out"
cc=x86_64-w64-mingw32-gcc
objdump=x86_64-w64-mingw32-objdump
wine_ucrt=
for dir in /usr/lib/x86_64-linux-gnu/wine/x86_64-windows /usr/lib/wine/x86_64-windows; do
  [ -f "$dir/ucrtbase.dll" ] && wine_ucrt=$dir/ucrtbase.dll && break
done
[ -n "$wine_ucrt" ] || { echo "no Wine ucrtbase.dll (apt: wine64)" >&2; exit 2; }

"$cc" -shared -O2 -s -o "$out/bcryptprimitives.dll" "$here/bcryptprimitives.c" \
  "$here/bcryptprimitives.def" -lbcrypt
"$cc" -shared -O2 -s -o "$out/icuuc.dll" "$here/icuuc.c"

# ucrtbase.dll: our functions under their names, everything else forwarded.
"$objdump" -p "$wine_ucrt" > "$out/ucrtbase-exports.txt"
python3 - "$out/ucrtbase-exports.txt" "$here/ucrt_complex.c" > "$out/ucrtbase.def" <<'PY'
import re, sys
table = open(sys.argv[1]).read()
names = re.findall(r"^\s*\[\s*\d+\] (\S+)$", table.split("[Ordinal/Name Pointer] Table")[1], re.M)
source = [line for line in open(sys.argv[2]) if not line.startswith("#define")]
source = "".join(source)
ours = set(re.findall(r"\bshim_(\w+)\(", source)) - {"", "fn"}
for pair in re.findall(r"\b(?:UNARY|REAL)\((\w+)\)", source):
    ours |= {pair, pair + "f", pair + "l"}
print("LIBRARY ucrtbase.dll\nEXPORTS")
for name in names:
    print(f"  {name} = shim_{name}" if name in ours else f"  {name} = ucrtwine.{name}")
missing = ours - set(names)
if missing:
    sys.exit(f"not exported by Wine's ucrtbase: {sorted(missing)}")
PY
"$cc" -shared -O2 -s -static-libgcc -o "$out/ucrtbase.dll" "$here/ucrt_complex.c" "$out/ucrtbase.def" -lm
python3 - "$wine_ucrt" "$out/ucrtwine.dll" <<'PY'
import sys
data = bytearray(open(sys.argv[1], "rb").read())
mark = b"Wine builtin DLL"
assert data[0x40:0x40 + len(mark)] == mark, "no builtin mark where Wine puts it"
data[0x40:0x40 + len(mark)] = bytes(len(mark))
open(sys.argv[2], "wb").write(data)
PY
ls -l "$out"/*.dll
