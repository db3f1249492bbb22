// Where the shipped models are: the installed data directory, the source tree, $CANVAS_DATA_DIR.
#include "shipped_models.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"

namespace canvas::cli {

std::string data_dir() {
#ifdef CANVAS_DATA_DIR
  return CANVAS_DATA_DIR;
#else
  return "";
#endif
}

std::string shipped_model_path(const std::string& name, const std::string& help_command) {
  const std::string relative = "models/" + name;
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("CANVAS_DATA_DIR"); env && *env) dirs.push_back(env);
  dirs.push_back(".");
  // An installed tree moved elsewhere (cmake --install --prefix P): P/bin/canvas finds P/share/canvas.
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) dirs.push_back((exe.parent_path().parent_path() / "share" / "canvas").string());
  if (!data_dir().empty()) dirs.push_back(data_dir());
  dirs.push_back(CANVAS_SOURCE_DIR);
  std::string searched;
  for (const std::string& dir : dirs) {
    const std::string path = dir + "/" + relative;
    if (FILE* f = std::fopen(path.c_str(), "rb")) {
      std::fclose(f);
      return path;
    }
    searched += (searched.empty() ? "" : ", ") + dir;
  }
  throw Error("no model given (-m FILE.gguf) and the default model " + relative + " was not found in " +
              searched + "; see " + help_command + " --help");
}

std::string model_or_shipped(const Args& args, const std::string& name, const std::string& help_command) {
  return args.has("model") ? args.get("model", "") : shipped_model_path(name, help_command);
}

}  // namespace canvas::cli
