// Cutting a long text where no token can span the cut, so that a merge-based tokenizer (BPE, SentencePiece)
// encodes it piece by piece, with the ids of the whole text and the memory of one piece.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace canvas {

// The byte pairs adjacent in some token's text. A merge joins two symbols into a token whose text holds
// both, so two characters whose boundary pair (last byte, first byte) is in no token are never merged.
class TokenBytePairs {
 public:
  void add(std::string_view token) {
    for (size_t k = 1; k < token.size(); ++k) {
      const unsigned pair = unsigned(uint8_t(token[k - 1])) << 8 | uint8_t(token[k]);
      bits_[pair >> 6] |= uint64_t(1) << (pair & 63);
    }
  }
  bool in_a_token(uint8_t a, uint8_t b) const {
    const unsigned pair = unsigned(a) << 8 | b;
    return (bits_[pair >> 6] >> (pair & 63)) & 1;
  }
  // The first character boundary i >= max(from, 1) of text whose pair is in no token and that also(i)
  // accepts, or npos.
  template <class Accept>
  size_t cut(std::string_view text, size_t from, Accept also) const {
    for (size_t i = from < 1 ? 1 : from; i < text.size(); ++i) {
      if ((uint8_t(text[i]) & 0xC0) == 0x80) continue;  // inside a character
      if (!in_a_token(uint8_t(text[i - 1]), uint8_t(text[i])) && also(i)) return i;
    }
    return std::string_view::npos;
  }

 private:
  std::array<uint64_t, 1024> bits_{};
};

// encode(piece, whole) on consecutive pieces of text, each cut at cut(from) for from = the piece's start +
// piece_bytes (npos: no cut, the rest is one piece); whole is true when the piece is the whole text.
template <class Cut, class Encode>
void encode_in_pieces(std::string_view text, size_t piece_bytes, Cut cut, Encode encode) {
  size_t start = 0;
  while (text.size() - start > piece_bytes) {
    const size_t at = cut(start + piece_bytes);
    if (at == std::string_view::npos) break;
    encode(text.substr(start, at - start), false);
    start = at;
  }
  encode(text.substr(start), start == 0);
}

}  // namespace canvas
