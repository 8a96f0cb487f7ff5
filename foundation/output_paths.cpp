// refuse_outputs_over_inputs: paths compared in canonical form (the part that exists resolved, links and ".."
// included), existing files also by identity (a hard link is the same file under another name).
#include "foundation/output_paths.h"

#include <algorithm>
#include <stdexcept>
#include <system_error>

namespace ferry {
namespace {

namespace fs = std::filesystem;
using Kind = PathUse::Kind;

struct Resolved {
  const PathUse* use = nullptr;
  fs::path canonical;
  bool exists = false, folder = false;
};

fs::path without_trailing_separator(fs::path p) {
  p = p.lexically_normal();
  return !p.has_filename() && p.has_relative_path() ? p.parent_path() : p;
}

Resolved resolve(const PathUse& use) {
  Resolved r;
  r.use = &use;
  std::error_code ec;
  const fs::path absolute = fs::absolute(use.path, ec);
  r.canonical = without_trailing_separator(ec ? use.path : fs::weakly_canonical(absolute, ec));
  if (ec) r.canonical = without_trailing_separator(absolute);
  const fs::file_status st = fs::status(use.path, ec);
  r.exists = !ec && fs::exists(st);
  r.folder = r.exists && fs::is_directory(st);
  return r;
}

// A device, a pipe or a socket (/dev/null, /dev/stdout): nothing on disk to lose.
bool special(const PathUse& use) {
  std::error_code ec;
  const fs::file_status st = fs::status(use.path, ec);
  return !ec && fs::exists(st) && !fs::is_directory(st) && !fs::is_regular_file(st);
}

bool same(const Resolved& a, const Resolved& b) {
  std::error_code ec;
  return a.canonical == b.canonical || (a.exists && b.exists && fs::equivalent(a.canonical, b.canonical, ec));
}

// Whether `inner` lies inside the folder `outer`, below it.
bool inside(const fs::path& inner, const fs::path& outer) {
  const auto [o, i] = std::mismatch(outer.begin(), outer.end(), inner.begin(), inner.end());
  return o == outer.end() && i != inner.end();
}

std::string quoted(const fs::path& p) { return "'" + p.string() + "'"; }

// "the data.path file", "the token cache file": a use's name with its article.
std::string the(const std::string& name) { return name.starts_with("the ") ? name : "the " + name; }

// An output against an input: the same file or folder, or inside the input's folder.
void check_against_input(const Resolved& out, const Resolved& in) {
  const PathUse &o = *out.use, &i = *in.use;
  if (same(out, in))  // the input named as well where the two paths differ in their text (a link, "..")
    throw std::runtime_error(o.name + ": " + quoted(o.path) + " is " + the(i.name) + (in.folder ? " folder" : " file") +
                             (o.path == i.path ? "" : " " + quoted(i.path)) +
                             ", which this command reads; writing there would destroy it: choose another path");
  if (in.folder && inside(out.canonical, in.canonical))
    throw std::runtime_error(o.name + ": " + quoted(o.path) + " lies inside " + the(i.name) + " folder " +
                             quoted(i.path) +
                             ", which this command reads and must find as it was: write it outside that folder");
}

// Two outputs: one file, or one inside the other's file.
void check_against_output(const Resolved& a, const Resolved& b) {
  const PathUse &x = *a.use, &y = *b.use;
  if (same(a, b))
    throw std::runtime_error(y.name + ": " + quoted(y.path) + " is also where " + x.name +
                             " writes; each output needs a path of its "
                             "own: choose another for one of them");
  for (const auto& [inner, outer] : {std::pair{&a, &b}, {&b, &a}})
    if (outer->use->kind == Kind::Output && inside(inner->canonical, outer->canonical))
      throw std::runtime_error(inner->use->name + ": " + quoted(inner->use->path) + " lies inside " +
                               quoted(outer->use->path) + ", which " + outer->use->name +
                               " writes as a file: choose another path for one of them");
}

}  // namespace

void refuse_outputs_over_inputs(const std::vector<PathUse>& uses) {
  std::vector<Resolved> inputs, outputs;
  for (const PathUse& use : uses) {
    if (use.path.empty() || special(use)) continue;
    const Resolved r = resolve(use);
    if (use.kind == Kind::Input && r.exists)
      inputs.push_back(r);  // a missing input is the reader's error, with its own message
    if (use.kind == Kind::Output && r.folder)
      throw std::runtime_error(use.name + ": " + quoted(use.path) + " is a folder; name a file to write");
    if (use.kind != Kind::Input) outputs.push_back(r);
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    for (const Resolved& in : inputs) check_against_input(outputs[k], in);
    for (size_t j = 0; j < k; ++j) check_against_output(outputs[j], outputs[k]);
  }
}

}  // namespace ferry
