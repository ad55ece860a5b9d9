# Sourced by scripts/deps.sh and scripts/kernel-lab.sh: the Debian archive this machine
# already uses, for the suites the project adds (bookworm-backports, and the lab's kernel
# suites). The project names no mirror host: the URI is the one of this machine's own
# Debian sources, only the suite is added.
#
#   debian_uri SUITE     print the URI of this machine's Debian sources that serves SUITE's
#                        archive: for a `*-security` suite the URI of a source whose suites
#                        are `*-security` ones, else that of a source of a release suite
#                        (e.g. `bookworm`, `bookworm-updates`). Reads the deb822 files
#                        /etc/apt/sources.list.d/*.sources (`URIs:`, `Suites:`, `Types: deb`)
#                        and the one-line /etc/apt/sources.list and
#                        /etc/apt/sources.list.d/*.list (`deb [opts] URI suite comps`), as
#                        sources.list(5) describes them. Exit 1 (and a message) when none.
#   suite_apt DIR SUITE CMD ARGS...
#                        run apt-get/apt-cache CMD with a private sources list holding only
#                        `deb URI SUITE main` (DIR/SUITE/sources.list), private package lists
#                        and cache under DIR/SUITE: the host's apt configuration is not
#                        changed (only downloads; nothing is installed from it).
#   suite_apt_update DIR SUITE
#                        write DIR/SUITE/sources.list and `apt-get update` it when its lists
#                        are missing or older than a day (a failed update with lists
#                        present is only a warning).
#
# DEBIAN_SOURCES_ROOT (tests only): read the sources under that directory instead of /.

debian_uri() {
    local suite="$1" want=release f
    [[ "$suite" == *-security ]] && want=security
    {
        for f in "${DEBIAN_SOURCES_ROOT:-}"/etc/apt/sources.list.d/*.sources; do
            [[ -f "$f" ]] || continue
            # One record per stanza: "types|uris|suites".
            awk 'BEGIN { RS = ""; FS = "\n" }
                 { t = ""; u = ""; s = ""
                   for (i = 1; i <= NF; i++) {
                       l = $i
                       if (l ~ /^#/) continue
                       if (l ~ /^[Tt]ypes:/) { sub(/^[^:]*:[ \t]*/, "", l); t = l }
                       else if (l ~ /^URIs:/) { sub(/^[^:]*:[ \t]*/, "", l); u = l }
                       else if (l ~ /^Suites:/) { sub(/^[^:]*:[ \t]*/, "", l); s = l }
                       else if (l ~ /^Enabled:[ \t]*no/) { t = "" }
                   }
                   if (t ~ /(^| )deb( |$)/ && u != "" && s != "") print t "|" u "|" s }' "$f"
        done
        for f in "${DEBIAN_SOURCES_ROOT:-}"/etc/apt/sources.list "${DEBIAN_SOURCES_ROOT:-}"/etc/apt/sources.list.d/*.list; do
            [[ -f "$f" ]] || continue
            # deb [options] URI suite components...
            sed -n 's/^[ \t]*deb[ \t]\+\(\[[^]]*\][ \t]\+\)\?\([^ \t]\+\)[ \t]\+\([^ \t]\+\).*/deb|\2|\3/p' "$f"
        done
    } | awk -F'|' -v want="$want" '
        { n = split($3, s, /[ \t]+/)
          for (i = 1; i <= n; i++) {
              sec = (s[i] ~ /-security$/ || s[i] ~ /\/updates$/)
              rel = (s[i] ~ /^[a-z]+(-updates|-backports)?$/)
              if ((want == "security" && sec) || (want == "release" && rel)) {
                  split($2, u, /[ \t]+/); print u[1]; exit
              }
          } }' | grep . || {
        echo "debian-sources: no Debian $want source in /etc/apt/sources.list or /etc/apt/sources.list.d/ to take the mirror for $suite from" >&2
        return 1
    }
}

suite_apt() {
    local d="$1/$2" cmd="$3"
    shift 3
    "$cmd" -o Dir::Etc::SourceList="$d/sources.list" -o Dir::Etc::SourceParts="$d/parts" \
        -o Dir::State::Lists="$d/lists" -o Dir::Cache="$d/cache" \
        -o APT::Sandbox::User=root "$@"
}

suite_apt_update() {
    local d="$1/$2" uri
    uri="$(debian_uri "$2")" || return 1
    mkdir -p "$d/parts" "$d/lists/partial" "$d/cache/archives/partial"
    if [[ "$(cat "$d/sources.list" 2>/dev/null)" != "deb $uri $2 main" ]]; then
        echo "deb $uri $2 main" >"$d/sources.list"
        rm -f "$d/lists/"*_Release "$d/lists/"*_InRelease
    fi
    if [[ -n "$(find "$d/lists" -maxdepth 1 -name '*Release' -mmin -1440 2>/dev/null)" ]]; then
        return 0
    fi
    suite_apt "$1" "$2" apt-get update -qq && return 0
    if [[ -n "$(find "$d/lists" -maxdepth 1 -name '*Packages*' 2>/dev/null)" ]]; then
        echo "debian-sources: apt-get update of $2 failed; using its older lists" >&2
        return 0
    fi
    return 1
}
