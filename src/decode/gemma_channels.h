// Gemma 4's channels in a model's generated text: its thinking (<|channel>thought\n ... <channel|>), its
// answer, and its tool calls (<|tool_call>call:NAME{key:value,...}<tool_call|>) as OpenAI tool calls.
#pragma once
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace canvas {

struct ChatFormat;
class TextTokenizer;

// The marker with which a model hands its turn over to the tools after its calls. In a format with channels
// it ends the reply as the end of turn does (Generator adds its token to the stop ids).
inline constexpr std::string_view kGemmaToolHandover = "<|tool_response>";

// One tool call as OpenAI's API returns it: the function's name and its arguments as JSON text.
struct ChatToolCall {
  std::string id;  // "call_<n>", numbered in the reply
  std::string name;
  std::string arguments;
};

// A reply split into what a chat client shows apart.
struct ChatReply {
  std::string reasoning_content;  // the thinking ("" when none)
  std::string content;            // the answer
  std::vector<ChatToolCall> tool_calls;
  // The bytes of the text that are final: reasoning, content and tool calls hold their text only. The rest
  // (text that may begin a marker, a tool call not closed yet) is held back until more text decides it.
  size_t final_bytes = 0;

  // The reply as OpenAI's assistant message: content (null when empty and there are tool calls),
  // reasoning_content when there was thinking, tool_calls when there were calls.
  nlohmann::ordered_json message_json() const;
};

// Splits Gemma 4 output. With more_to_come, a marker cut at the end of the text and an unclosed tool call
// are held back, so that the reply of a longer text only appends to the reply of a shorter one (a stream
// sends the difference); without it, everything is placed: an unclosed thought is all reasoning, an
// unclosed or malformed tool call stays in the content as it was written. `<turn|>` ends the reply and
// `<|tool_response>` (the model handing over to the tools) is dropped. Never throws on any text.
ChatReply parse_gemma_channels(std::string_view text, bool more_to_come = false);

// Gemma's tool-call argument text ("key:value,..." with <|"|>-quoted strings, numbers, true / false /
// null, nested {} and []) as a JSON object's text; false when it is not well formed.
bool gemma_arguments_to_json(std::string_view arguments, std::string& json);

// What serve and `canvas chat` call: the reply of a model's generated tokens in its chat format. A format
// with Gemma 4's channels (a template that writes "<|channel>", as the release's does; the built-in gemma4
// format opens no channels) is split as above, from the tokens' text with special tokens written out; any
// other format gives the text as content.
bool chat_format_has_channels(const ChatFormat& format);
ChatReply chat_reply(const ChatFormat& format, const TextTokenizer& tokenizer,
                     const std::vector<int32_t>& tokens, bool more_to_come = false);
// The same from generated text: text made with GenerationRequest::special_text set when the format has
// channels (its markers written out), else as generated.
ChatReply chat_reply(const ChatFormat& format, std::string_view text, bool more_to_come = false);

// What each new piece of a growing reply adds, for a stream (serve's deltas, `canvas chat`'s printer): each
// call takes the text so far (each one extending the last) and gives the reasoning and content it adds and
// the tool calls closed since the last call; a marker cut at the end of the text or a tool call not closed
// yet waits for the next call. `finished`: the text is final and everything is placed. A null format, or one
// without channels: all of the text is content.
struct ReplyDelta {
  std::string reasoning_content, content;
  size_t first_call = 0;  // the index in the reply of tool_calls[0]
  std::vector<ChatToolCall> tool_calls;
};
class ReplyDeltas {
 public:
  explicit ReplyDeltas(const ChatFormat* format) : format_(format) {}
  ReplyDelta next(std::string_view text, bool finished);
  const ChatReply& reply() const { return reply_; }  // the reply of the last call's text

 private:
  const ChatFormat* format_;
  ChatReply reply_;
  size_t reasoning_sent_ = 0, content_sent_ = 0, calls_sent_ = 0;
};

}  // namespace canvas
