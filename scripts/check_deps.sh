#!/usr/bin/env bash
# Catches build dependencies missing from scripts/setup.sh: configures Ferry once in a scratch build folder and fails
# when CMake found or loaded a file of a Debian package that setup.sh would not bring onto a fresh Debian 12.
# Usage: scripts/check_deps.sh [build-dir]   (default: a temporary folder, removed afterwards)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/check_deps.XXXXXX")
trap 'rm -rf "$work"' EXIT
build=$(realpath -m "${1:-$work/build}")
die() { echo "check_deps: $*" >&2; exit 2; }

# Optional lookups: tools CTest merely offers (dashboards, memcheck, coverage) and files run by include(... OPTIONAL);
# configure, build and ctest work without them, so finding one in an extra package is a note, not a failure.
optional='^(GITCOMMAND|MEMORYCHECK_COMMAND|COVERAGE_COMMAND|CVSCOMMAND|SVNCOMMAND|HGCOMMAND|P4COMMAND|BZRCOMMAND|optional include\(\))$'

# Allowed: what a fresh Debian 12 (its Essential and Priority-required packages, as debootstrap's minbase and the
# debian:12 image have) holds after setup.sh. apt's own resolver, simulated against an empty dpkg status, gives that
# closure with alternatives and virtual packages chosen as on the real machine, offline, from the local lists.
mapfile -t setup_pkgs < <("$root/scripts/setup.sh" --list)
[ ${#setup_pkgs[@]} -gt 0 ] || die "scripts/setup.sh --list printed no packages"
if ! compgen -G '/var/lib/apt/lists/*_Packages*' > /dev/null; then
  [ "$(id -u)" -eq 0 ] || die "no apt package lists in /var/lib/apt/lists (needed to resolve setup.sh's packages): run 'apt-get update' as root"
  apt-get update -qq || die "apt-get update failed; the check needs the package lists to resolve setup.sh's packages"
fi
apt-cache dumpavail | awk -v RS= '/(^|\n)(Priority: required|Essential: yes)(\n|$)/ && match($0, /^Package: [^\n]+/) {
  print substr($0, 10, RLENGTH - 9) }' | sort -u > "$work/base"
[ -s "$work/base" ] || die "apt-cache dumpavail listed no Essential or required packages; are the apt lists complete?"
# shellcheck disable=SC2046  # one package name a line
if ! apt-get -s -o Dir::State::status=/dev/null install --no-install-recommends $(cat "$work/base") "${setup_pkgs[@]}" \
     > "$work/apt" 2>&1; then
  grep '^E:' "$work/apt" >&2 || tail -5 "$work/apt" >&2
  die "apt cannot resolve the packages of scripts/setup.sh --list (above)"
fi
awk '/^Inst / { sub(/:.*/, "", $2); print $2 }' "$work/apt" | sort -u > "$work/allowed"

echo "check_deps: configuring in $build (${#setup_pkgs[@]} packages in setup.sh, $(wc -l < "$work/allowed") on a fresh machine after it)"
configure_rc=0
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release --trace-format=json-v1 --trace-redirect="$work/trace" \
  > "$work/configure.log" 2>&1 || configure_rc=$?
[ -f "$build/CMakeCache.txt" ] || { tail -20 "$work/configure.log" >&2; die "configure wrote no $build/CMakeCache.txt (log above)"; }

# Used: "<what led to it>\t<path>" for every file CMake found or ran.
{
  # The cache: what find_* found (FILEPATH/PATH entries, <Pkg>_DIR) and compilers given as one absolute path.
  awk '/^(#|\/\/)/ { next }
       { i = index($0, "="); if (!i) next
         kt = substr($0, 1, i - 1); v = substr($0, i + 1); j = index(kt, ":"); k = substr(kt, 1, j - 1); t = substr(kt, j + 1)
         if (t == "INTERNAL" || t == "STATIC" || k == "CMAKE_INSTALL_PREFIX") next
         if (t == "FILEPATH" || t == "PATH" || k ~ /_DIR$/ || (t == "STRING" && v ~ /^\/[^ ;]*$/)) {
           n = split(v, vs, ";"); for (m = 1; m <= n; m++) if (vs[m] ~ /^\//) print k "\t" vs[m] } }' "$build/CMakeCache.txt"
  # The trace: every CMake file configure executed, package configs and the Find modules they call (dnnl's FindOpenCL).
  # A file run only under an include(... OPTIONAL) (GTest's GMockTargets.cmake) is not needed; a frame one deeper than
  # the line before was entered by that line, so it inherits that line's optionality.
  awk 'function str(k) { return match($0, "\"" k "\":\"[^\"]*\"") ? substr($0, RSTART + length(k) + 4, RLENGTH - length(k) - 5) : "" }
       match($0, /"global_frame":[0-9]+/) { g = substr($0, RSTART + 15, RLENGTH - 15) + 0; f = str("file")
         if (g > depth) opt[g] = opt[g - 1] || optinc[g - 1]
         optinc[g] = str("cmd") == "include" && /"args":\[[^]]*"OPTIONAL"/; depth = g
         print (opt[g] ? "optional include()" : "cmake --trace") "\t" f }' "$work/trace"
  # The generated build files: the libraries and include directories imported targets bring in (absent if generation failed).
  find "$build" \( -name link.txt -o -name flags.make \) -exec cat {} + | tr ' ' '\n' |
    sed -n 's|^\(-[IL]\)\{0,1\}\(/[^ ]*\)$|link/flags of the build\t\2|p'
} | LC_ALL=C sort -u > "$work/used"

# Each path's owners: of the path itself (group A) and of its resolved target (group B, alternatives and .so links),
# each under both spellings, since merged /usr makes /lib and /usr/lib the same directory but dpkg knows only one.
forms() {  # group path spelling type
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4"
  case $3 in
    /usr/bin/* | /usr/sbin/* | /usr/lib/* | /usr/lib32/* | /usr/lib64/* | /usr/libx32/*) printf '%s\t%s\t%s\t%s\n' "$1" "$2" "${3#/usr}" "$4" ;;
    /bin/* | /sbin/* | /lib/* | /lib32/* | /lib64/* | /libx32/*) printf '%s\t%s\t%s\t%s\n' "$1" "$2" "/usr$3" "$4" ;;
  esac
}
cut -f2 "$work/used" | sort -u | while read -r p; do
  case $p in "$root" | "$root"/* | "$build" | "$build"/* | "$work"/*) continue ;; esac
  [ -e "$p" ] || continue
  type=f; [ -d "$p" ] && type=d
  real=$(readlink -f "$p")
  forms A "$p" "$p" "$type"
  [ "$real" = "$p" ] || forms B "$p" "$real" "$type"
done > "$work/forms"
cut -f3 "$work/forms" | sort -u | xargs -r -d '\n' dpkg-query -S 2>/dev/null |
  awk '!/^diversion by / { i = index($0, ": "); o = substr($0, 1, i - 1); gsub(/:[a-z0-9]+/, "", o); gsub(/, /, ",", o)
       print substr($0, i + 2) "\t" o }' > "$work/owners" || true

# Judge each path: a group of it is fine when one of its owners is allowed; a directory several packages own
# (/usr/include) identifies nothing and is skipped. One line per missing package, shown by its best-named path.
awk -F'\t' -v optional="$optional" -v configure_rc="$configure_rc" '
  FILENAME == ARGV[1] { allowed[$1]; next }
  FILENAME == ARGV[2] { why[$2] = why[$2] (why[$2] == "" ? "" : ", ") $1
                        if ($1 !~ optional) needed[$2]
                        if ($1 !~ /^(cmake --trace|link\/flags of the build|optional include\(\))$/) named[$2]; next }
  FILENAME == ARGV[3] { owners[$1] = $2; next }
  { if (!($2 in isdir)) { paths[++np] = $2; isdir[$2] = $4 == "d" }
    if ($3 ~ /^\/usr\/local\/cuda/) cuda[$2]
    grp[$2, $1] = grp[$2, $1] "," ($3 in owners ? owners[$3] : "") }
  END {
    for (i = 1; i <= np; i++) { p = paths[i]
      if (p in cuda) { ncuda++; continue }
      owned = 0
      for (gi = 1; gi <= 2; gi++) { g = gi == 1 ? "A" : "B"; if (!((p, g) in grp)) continue
        n = split(grp[p, g], os, ","); split("", has); list = ""; cnt = 0; ok = 0
        for (m = 1; m <= n; m++) if (os[m] != "" && !(os[m] in has)) {
          has[os[m]]; cnt++; list = list (cnt > 1 ? " | " : "") os[m]; if (os[m] in allowed) ok = 1 }
        if (cnt == 0) continue
        owned = 1
        if (cnt > 1 && isdir[p]) continue
        for (o in has) checked[o]
        if (ok) continue
        key = (p in needed ? "MISSING" : "note") SUBSEP list
        if (!(key in rep)) keys[++nk] = key
        if (!(key in rep) || ((p in named) && !(rep[key] in named))) rep[key] = p
        nfiles[key]++
      }
      if (!owned) printf "check_deps: warning: %s (%s) belongs to no Debian package; a fresh machine has it only if something else installs it\n", p, why[p]
    }
    for (pass = 1; pass <= 2; pass++) for (i = 1; i <= nk; i++) { split(keys[i], kv, SUBSEP); p = rep[keys[i]]
      more = nfiles[keys[i]] > 1 ? " and " nfiles[keys[i]] - 1 " more of its files" : ""
      if ((kv[1] == "MISSING") != (pass == 2)) continue
      if (kv[1] == "MISSING") { nmiss++
        printf "check_deps: MISSING %s: CMake used %s (%s)%s; add %s to scripts/setup.sh\n", kv[2], p, why[p], more, index(kv[2], " | ") ? "one of them" : "it" }
      else printf "check_deps: note: %s (%s)%s comes from %s, which scripts/setup.sh does not install; only optional lookups use it\n", p, why[p], more, kv[2] }
    if (ncuda) printf "check_deps: %d paths under /usr/local/cuda (the CUDA toolkit: optional, not from Debian, used when nvcc is found)\n", ncuda
    for (o in checked) nchecked++
    if (!nmiss && configure_rc) printf "check_deps: no package missing among the %d configure used before it failed\n", nchecked
    else if (!nmiss) printf "check_deps: every package CMake used is installed by scripts/setup.sh (%d packages checked)\n", nchecked
    exit (nmiss > 0) }' "$work/allowed" "$work/used" "$work/owners" "$work/forms" || misses=$?

if [ "$configure_rc" -ne 0 ]; then
  tail -15 "$work/configure.log" >&2
  echo "check_deps: configure failed (exit $configure_rc, log above), so only what it found before failing was checked" >&2
  exit 1
fi
exit "${misses:-0}"
