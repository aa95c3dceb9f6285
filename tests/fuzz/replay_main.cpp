// Replays a libFuzzer corpus without libFuzzer: feeds every regular file of the directories
// (or the files) given on the command line to LLVMFuzzerTestOneInput, in name order. The
// target abort()s on a failure, so reaching the end means every input passed. Built by
// tests/CMakeLists.txt with fuzz_rope_config.cpp as peal_fuzz_replay (ctest
// fuzz_corpus_replay) and with fuzz_gguf_config.cpp as peal_fuzz_gguf_replay (ctest
// fuzz_gguf_corpus_replay); scripts/fuzz.sh builds the same targets with libFuzzer instead.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s corpus_dir_or_file...\n", argv[0]);
    return 2;
  }
  std::vector<fs::path> files;
  for (int a = 1; a < argc; ++a) {
    const fs::path p(argv[a]);
    if (fs::is_directory(p)) {
      for (const auto& e : fs::directory_iterator(p))
        if (e.is_regular_file()) files.push_back(e.path());
    } else if (fs::is_regular_file(p)) {
      files.push_back(p);
    } else {
      std::fprintf(stderr, "%s: no such file or directory: %s\n", argv[0], argv[a]);
      return 2;
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "%s: no input files\n", argv[0]);
    return 2;
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                  std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      std::fprintf(stderr, "%s: cannot read %s\n", argv[0], f.string().c_str());
      return 2;
    }
    std::printf("%s (%zu bytes)\n", f.filename().string().c_str(), bytes.size());
    std::fflush(stdout);  // the name of the input is visible if the target aborts
    LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("%zu inputs replayed, all passed\n", files.size());
  return 0;
}
