// hybridseq-spec: architecture specs to C++ (tools/spec/spec.hpp has the format).
//
//   hybridseq-spec canonical '<spec or @file>' [--set d=4]   # validate; print canonical spec and type
//   hybridseq-spec header --namespace ns --output v.hpp Small=@small.json Big=@big.json
//   hybridseq-spec presets --part 0 --parts 4 --output presets0.cpp   # hybridseq-ablate's own
//
// `header` is what CMake's hybridseq_add_variants runs; `presets` builds hybridseq-ablate.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "generate.hpp"
#include "presets.hpp"

using namespace hybridseq;

namespace {

/// A spec argument: JSON text, or @path of a JSON file.
spec::json load(const std::string& arg) {
  if (arg.empty() || arg[0] != '@') return spec::read(arg, "the spec");
  std::ifstream in(arg.substr(1));
  if (!in) fail<io_error>("hybridseq-spec", "cannot read '", arg.substr(1), "'");
  std::stringstream text;
  text << in.rdbuf();
  return spec::read(text.str(), "'" + arg.substr(1) + "'");
}

/// Writes `text` to `path` only when it differs, so that builds depending on it stay up to date.
void write_if_changed(const std::string& path, const std::string& text) {
  {
    std::ifstream in(path);
    std::stringstream old;
    old << in.rdbuf();
    if (in && old.str() == text) return;
  }
  const std::string tmp = path + ".tmp";
  std::ofstream out(tmp, std::ios::trunc);
  out << text;
  out.close();
  if (!out || std::rename(tmp.c_str(), path.c_str()) != 0)
    fail<io_error>("hybridseq-spec", "cannot write '", path, "'");
}

spec::json assignments(const std::vector<std::string>& sets) {
  spec::json vars = spec::json::object();
  for (const auto& s : sets) {
    const auto eq = s.find('=');
    if (eq == std::string::npos || eq == 0) fail<config_error>("--set", "'", s, "' is not name=value");
    const std::string value = s.substr(eq + 1);
    vars[s.substr(0, eq)] = spec::json::accept(value) ? spec::json::parse(value) : spec::json(value);
  }
  return vars;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hybridseq-spec: architecture specs to C++ types"};
  app.require_subcommand(1);
  std::string output, ns = "variants";
  std::vector<std::string> args, sets;
  int part = 0, parts = 1;

  auto* canonical = app.add_subcommand("canonical", "validate a spec; print its canonical form and C++ type");
  canonical->add_option("spec", args, "the spec (JSON or @file)")->required()->expected(1);
  canonical->add_option("--set", sets, "variable assignments name=value");

  auto* header = app.add_subcommand("header", "write a header of named model types and their Options");
  header->add_option("--output", output, "the header to write")->required();
  header->add_option("--namespace", ns, "the namespace of the types")->capture_default_str();
  header->add_option("specs", args, "Name=<spec or @file> ...")->required();

  auto* presets = app.add_subcommand("presets", "write a part of hybridseq-ablate's preset registrations");
  presets->add_option("--output", output, "the translation unit to write")->required();
  presets->add_option("--part", part, "which part")->required();
  presets->add_option("--parts", parts, "into how many parts the presets are split")->required();

  CLI11_PARSE(app, argc, argv);
  try {
    if (*canonical) {
      const auto v = spec::parse(load(args.at(0)), assignments(sets));
      std::printf("%s\n%s\n", v.spec.dump().c_str(), v.cpp.c_str());
    } else if (*header) {
      std::vector<std::pair<std::string, spec::Variant>> named;
      for (const auto& a : args) {
        const auto eq = a.find('=');
        if (eq == std::string::npos || eq == 0)
          fail<config_error>("hybridseq-spec header", "'", a, "' is not Name=spec");
        named.emplace_back(a.substr(0, eq), spec::parse(load(a.substr(eq + 1))));
      }
      write_if_changed(output, spec::header_source(ns, named));
    } else {
      if (parts < 1 || part < 0 || part >= parts)
        fail<config_error>("hybridseq-spec presets", "--part ", part, " is not in [0, --parts ", parts, ")");
      std::vector<spec::Variant> mine;
      const auto all = spec::presets();
      for (std::size_t i = std::size_t(part); i < all.size(); i += std::size_t(parts))
        mine.push_back(spec::parse(all[i].spec));
      write_if_changed(output, spec::registration_source(mine, "hybridseq-spec presets"));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
