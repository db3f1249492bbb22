// Subcommands of the canvas CLI that live in their own files.
#pragma once

namespace canvas::cli {

int cmd_sudoku(int argc, char** argv);
int cmd_train(int argc, char** argv);
int cmd_convert(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_bench_train(int argc, char** argv);  // canvas bench --train (bench_train.cpp)
int cmd_chat(int argc, char** argv);
int cmd_score(int argc, char** argv);
int cmd_tokenizer(int argc, char** argv);
int cmd_serve(int argc, char** argv);
int cmd_quantize(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_detokenize(int argc, char** argv);

}  // namespace canvas::cli
