// OpenAI request parsing and response JSON for canvas serve.
#include "serve/openai.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "core/error.h"
#include "text/json_schema.h"
#include "decode/random_seed.h"
#include "io/json.h"

namespace canvas::serve {

using nlohmann::json;

json error_json(int status, const std::string& message, const std::string& param, const std::string& code) {
  json e = {{"message", message},
            {"type", status >= 500 ? "server_error" : "invalid_request_error"},
            {"param", param.empty() ? json(nullptr) : json(param)},
            {"code", code.empty() ? json(nullptr) : json(code)}};
  return json{{"error", e}};
}

namespace {

// OpenAI's limit on alternatives per token (chat's top_logprobs; the legacy logprobs allowed 5).
constexpr int64_t kMaxTopLogprobs = 20;

ApiError bad(const std::string& field, const std::string& message) { return ApiError(400, message, field); }

int64_t get_int(const json& v, const std::string& field, int64_t lo, int64_t hi) {
  if (!v.is_number_integer() && !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()))
    throw bad(field, "'" + field + "' must be an integer");
  if (v.is_number_float() && std::fabs(v.get<double>()) > 9e15) throw bad(field, "'" + field + "' is out of range");
  const int64_t x = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX) ? INT64_MAX
                    : v.is_number_float()                                             ? int64_t(v.get<double>())
                                                                                      : v.get<int64_t>();
  if (x < lo || x > hi)
    throw bad(field, "'" + field + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi) +
                         " (got " + std::to_string(x) + ")");
  return x;
}

double get_number(const json& v, const std::string& field) {
  if (!v.is_number()) throw bad(field, "'" + field + "' must be a number");
  const double x = v.get<double>();
  if (!std::isfinite(x)) throw bad(field, "'" + field + "' must be finite");
  return x;
}

bool get_bool(const json& v, const std::string& field) {
  if (!v.is_boolean()) throw bad(field, "'" + field + "' must be true or false");
  return v.get<bool>();
}

std::string get_string(const json& v, const std::string& field) {
  if (!v.is_string()) throw bad(field, "'" + field + "' must be a string");
  return v.get<std::string>();
}

// Message content: a string, or an array of text parts: {"type": "text", "text": ...} (chat completions), or
// input_text / output_text (the Responses API's parts of a user's and of an earlier assistant's message).
std::string content_text(const json& v, const std::string& field) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) throw bad(field, "'" + field + "' must be a string or an array of text parts");
  std::string text;
  for (const json& part : v) {
    const bool text_type =
        part.is_object() && part.contains("type") &&
        (part["type"] == "text" || part["type"] == "input_text" || part["type"] == "output_text");
    if (!text_type || !part.contains("text") || !part["text"].is_string())
      throw bad(field,
                "'" + field + "' parts must be {\"type\": \"text\" (or \"input_text\"), \"text\": \"...\"}");
    text += part["text"].get<std::string>();
  }
  return text;
}

// The tool fields, parsed here only (tools: [{"type": "function", "function": {"name", ...}}]; tool_choice:
// none | auto | required | {"type": "function", "function": {"name"}}), kept in the request for a chat
// template that takes them; ignored (logged) otherwise.
void parse_tools(const std::string& key, const json& value, ApiRequest& r) {
  if (key == "parallel_tool_calls") {
    get_bool(value, key);
    return;
  }
  if (key == "tool_choice") {
    const bool named = value.is_object() && value.contains("function") && value["function"].is_object() &&
                       value["function"].contains("name") && value["function"]["name"].is_string();
    if (!(value.is_string() && (value == "none" || value == "auto" || value == "required")) && !named)
      throw bad(key, "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    r.tool_choice = value;
    return;
  }
  if (!value.is_array()) throw bad(key, "'tools' must be an array");
  for (size_t i = 0; i < value.size(); ++i) {
    const json& tool = value[i];
    const std::string field = "tools[" + std::to_string(i) + "]";
    if (!tool.is_object() || !tool.contains("function") || !tool["function"].is_object() ||
        !tool["function"].contains("name") || !tool["function"]["name"].is_string())
      throw bad(field, "'" + field + "' must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
  }
  r.tools = value;
}

// A tool call of an assistant message as the client sent it back ({"id", "type": "function", "function":
// {"name", "arguments"}}): arguments that are a JSON object's text go to the template as the object (as
// llama-server passes them), so that a template writes them in its own form, as the model wrote them.
json template_tool_call(const json& call, const std::string& field) {
  if (!call.is_object() || !call.contains("function") || !call["function"].is_object() ||
      !call["function"].contains("name") || !call["function"]["name"].is_string())
    throw bad(field, "'" + field + "' must be {\"type\": \"function\", \"function\": {\"name\", \"arguments\"}}");
  json out = call;
  json& arguments = out["function"]["arguments"];
  if (arguments.is_string()) {
    const json parsed = json::parse(arguments.get<std::string>(), nullptr, false);
    if (parsed.is_object()) arguments = parsed;
  }
  return out;
}

// One message: role system / developer / user / assistant / tool, content (a string or text parts; null or
// absent only for an assistant message with tool_calls), and the fields a chat template reads:
// reasoning_content and tool_calls (assistant), tool_call_id and name (tool).
ChatMessage parse_message(const json& m, const std::string& field) {
  if (!m.is_object() || !m.contains("role")) throw bad(field, "'" + field + "' must be an object with 'role' and 'content'");
  ChatMessage msg;
  msg.role = get_string(m["role"], field + ".role");
  if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" && msg.role != "developer" &&
      msg.role != "tool")
    throw bad(field + ".role", "'" + field + ".role' must be system, developer, user, assistant or tool");
  if (msg.role == "developer") msg.role = "system";
  auto text = [&](const char* key) {
    return m.contains(key) && !m[key].is_null() ? get_string(m[key], field + "." + key) : std::string();
  };
  msg.reasoning_content = text("reasoning_content");
  msg.tool_call_id = text("tool_call_id");
  msg.name = text("name");
  if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
    const json& calls = m["tool_calls"];
    if (!calls.is_array()) throw bad(field + ".tool_calls", "'" + field + ".tool_calls' must be an array");
    msg.tool_calls = nlohmann::ordered_json::array();
    for (size_t i = 0; i < calls.size(); ++i)
      msg.tool_calls.push_back(
          nlohmann::ordered_json(template_tool_call(calls[i], field + ".tool_calls[" + std::to_string(i) + "]")));
  }
  const bool has_content = m.contains("content") && !m["content"].is_null();
  if (has_content)
    msg.content = content_text(m["content"], field + ".content");
  else if (!(msg.role == "assistant" && !msg.tool_calls.is_null()))
    throw bad(field, "'" + field + "' must be an object with 'role' and 'content'");
  return msg;
}

// reasoning_effort (chat), reasoning.effort (responses): OpenAI's levels.
std::string reasoning_effort_of(const json& value, const std::string& field) {
  const std::string effort = get_string(value, field);
  if (effort != "none" && effort != "minimal" && effort != "low" && effort != "medium" && effort != "high" &&
      effort != "xhigh")
    throw bad(field, "'" + field + "' must be none, minimal, low, medium, high or xhigh");
  return effort;
}

ChatMessage text_message(const std::string& role, const std::string& text) {
  ChatMessage m;
  m.role = role;
  m.content = text;
  return m;
}

// /v1/responses' input: a string (one user message) or a list of message items ({"type": "message"} or no
// type; role and content as chat's, content parts input_text / output_text). Other items (function calls,
// their outputs, reasoning) are a 400 naming the item: canvas keeps no tools or earlier responses here.
void parse_responses_input(const json& value, std::vector<ChatMessage>& messages) {
  if (value.is_string()) {
    messages.push_back(text_message("user", value.get<std::string>()));
    return;
  }
  if (!value.is_array() || value.empty())
    throw bad("input", "'input' must be a string or a non-empty array of messages");
  for (size_t i = 0; i < value.size(); ++i) {
    const json& item = value[i];
    const std::string field = "input[" + std::to_string(i) + "]";
    if (item.is_object() && item.contains("type") && item["type"] != "message")
      throw bad(field + ".type", "'" + field + ".type' must be message (got " + item["type"].dump() +
                                     "); other input items are not supported");
    messages.push_back(parse_message(item, field));
  }
}

// chat_template_kwargs: {"enable_thinking": bool} reaches the template; other keys are ignored (logged).
void parse_template_kwargs(const json& value, ApiRequest& r) {
  if (!value.is_object()) throw bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
  for (const auto& [k, v] : value.items()) {
    if (k == "enable_thinking")
      r.chat_extras.enable_thinking = get_bool(v, "chat_template_kwargs.enable_thinking");
    else
      r.ignored.push_back("chat_template_kwargs." + k);
  }
}

}  // namespace

std::shared_ptr<const JsonTemplate> compile_response_format(const nlohmann::ordered_json& schema) {
  try {
    return std::make_shared<const JsonTemplate>(compile_json_schema(schema, "response_format"));
  } catch (const Error& e) {
    throw bad("response_format", e.what());
  }
}

const char* input_field(Endpoint endpoint) {
  return endpoint == Endpoint::Completions       ? "prompt"
         : endpoint == Endpoint::ChatCompletions ? "messages"
                                                 : "input";
}

const char* max_tokens_field(Endpoint endpoint) {
  return endpoint == Endpoint::Responses ? "max_output_tokens" : "max_tokens";
}

ApiRequest parse_api_request(const std::string& body, Endpoint endpoint, SchemaCompile schema_compile) {
  const bool chat = endpoint != Endpoint::Completions;
  json root;
  try {
    // Depth-checked before parsing (io/json.h): a body nested thousands deep is a 400, not a stack overflow.
    root = parse_json(body, "the request body");
  } catch (const Error& e) {
    throw ApiError(400, e.what());
  }
  if (!root.is_object()) throw ApiError(400, "the request body must be a JSON object");
  ApiRequest r;
  r.endpoint = endpoint;
  r.chat = chat;
  // The fields each endpoint reads: those of every endpoint (OpenAI's sampling fields and canvas's decoding
  // ones), those of the two completion endpoints, and each one's own. The Responses API names some fields as
  // chat does with another shape (tools, text, stream_options): they are not read there.
  // clang-format off
  static const std::set<std::string> common = {
      "model", "temperature", "top_p", "top_k", "min_p", "seed", "stop", "stream", "user", "steps",
      "block_length", "threshold", "entropy_bound", "cache", "mode", "repeat_penalty", "draft_length",
      "draft_steps", "draft_lookup", "draft_lookup_length", "draft_tree", "draft_tree_depth", "overlap",
      "metadata", "store", "service_tier", "parse_special", "ignore_eos", "frequency_penalty",
      "presence_penalty", "logit_bias"};
  static const std::set<std::string> completions = {
      "max_tokens", "n", "stream_options", "canvas_draft", "response_format", "tools", "tool_choice",
      "parallel_tool_calls", "logprobs"};
  // clang-format on
  static const std::set<std::string> own[] = {
      {"prompt", "suffix", "echo"},
      {"messages", "max_completion_tokens", "top_logprobs", "chat_template_kwargs", "reasoning_effort"},
      {"input", "instructions", "max_output_tokens", "reasoning", "chat_template_kwargs"}};
  auto reads = [&](const std::string& key) {
    return common.count(key) || own[int(endpoint)].count(key) ||
           (endpoint != Endpoint::Responses && completions.count(key));
  };
  bool has_input = false;
  // Without max_tokens a reply runs to the end of its turn (or the context), as OpenAI's API does.
  r.settings.to_end_of_turn = true;
  int64_t top_logprobs = -1;  // chat: given
  std::string reasoning_effort;  // chat: given
  GenerationSettings& s = r.settings;
  // A value of a type the code below did not expect is the client's error (400 naming the field), never
  // a 500 with the JSON library's text.
  for (const auto& [key, value] : root.items()) try {
      if (!reads(key)) {
        // A field canvas does not know (a newer API's, another server's, ...) is ignored,
        // as llama-server does; the server logs it once.
        r.ignored.push_back(key);
        continue;
      }
    if (value.is_null()) continue;  // null means "not set", as OpenAI reads it
    if (key == "model") {
      r.model = get_string(value, key);
    } else if (key == "prompt") {
      if (value.is_array()) {
        if (value.size() != 1 || !value[0].is_string())
          throw bad(key, "'prompt' must be a string (or an array of exactly one string)");
        r.prompt = value[0].get<std::string>();
      } else {
        r.prompt = get_string(value, key);
      }
      has_input = true;
    } else if (key == "messages") {
      if (!value.is_array() || value.empty()) throw bad(key, "'messages' must be a non-empty array");
      for (size_t i = 0; i < value.size(); ++i)
        r.messages.push_back(parse_message(value[i], "messages[" + std::to_string(i) + "]"));
      has_input = true;
    } else if (key == "input") {
      parse_responses_input(value, r.messages);
      has_input = true;
    } else if (key == "instructions") {
      r.instructions = get_string(value, key);
    } else if (key == "reasoning") {  // /v1/responses: {"effort": ...}; its summary options mean nothing here
      if (!value.is_object()) throw bad(key, "'reasoning' must be an object");
      if (value.contains("effort") && !value["effort"].is_null())
        reasoning_effort = reasoning_effort_of(value["effort"], "reasoning.effort");
    } else if (key == "max_tokens" || key == "max_completion_tokens" || key == "max_output_tokens") {
      s.max_new_tokens = get_int(value, key, 1, 1 << 20);
    } else if (key == "temperature") {
      const double t = get_number(value, key);
      if (t < 0 || t > 100) throw bad(key, "'temperature' must be between 0 and 100");
      s.sampling.temperature = float(t);
      s.temperature_given = true;
      r.sampling_given.temperature = true;
    } else if (key == "top_p") {
      const double p = get_number(value, key);
      if (!(p > 0 && p <= 1)) throw bad(key, "'top_p' must be in (0, 1]");
      s.sampling.top_p = float(p);
      r.sampling_given.top_p = true;
    } else if (key == "top_k") {
      s.sampling.top_k = get_int(value, key, 0, 1 << 30);
      r.sampling_given.top_k = true;
    } else if (key == "min_p") {
      const double p = get_number(value, key);
      if (!(p >= 0 && p <= 1)) throw bad(key, "'min_p' must be in [0, 1]");
      s.sampling.min_p = float(p);
      r.sampling_given.min_p = true;
    } else if (key == "repeat_penalty") {
      const double r = get_number(value, key);
      if (!(r > 0 && r <= 10)) throw bad(key, "'repeat_penalty' must be in (0, 10]");
      s.sampling.repeat_penalty = float(r);
    } else if (key == "seed") {
      s.sampling.seed = uint64_t(get_int(value, key, INT64_MIN, INT64_MAX));
      r.seed_given = true;
    } else if (key == "stop") {
      if (value.is_string()) {
        s.stop = {value.get<std::string>()};
      } else if (value.is_array() && value.size() <= 4) {
        for (const json& v : value) s.stop.push_back(get_string(v, "stop"));
      } else {
        throw bad(key, "'stop' must be a string or an array of at most 4 strings");
      }
      for (const std::string& x : s.stop)
        if (x.empty()) throw bad(key, "'stop' strings must not be empty");
    } else if (key == "n") {
      if (get_int(value, key, 1, 128) != 1) throw bad(key, "only 'n' = 1 is supported");
    } else if (key == "stream") {
      r.stream = get_bool(value, key);
    } else if (key == "stream_options") {
      if (!value.is_object()) throw bad(key, "'stream_options' must be an object");
      for (const auto& [k, v] : value.items()) {
        if (k != "include_usage") throw bad("stream_options." + k, "unknown field 'stream_options." + k + "'");
        r.include_usage = get_bool(v, "stream_options.include_usage");
      }
    } else if (key == "user") {
      get_string(value, key);
    } else if (key == "frequency_penalty" || key == "presence_penalty") {
      // OpenAI's range; the tokens generated so far lower their logits (SamplingParams). Diffusion modes,
      // which have no left-to-right history, refuse a non-zero one (Generator::check).
      const double x = get_number(value, key);
      if (x < -2 || x > 2) throw bad(key, "'" + key + "' must be between -2 and 2");
      (key == "frequency_penalty" ? s.sampling.frequency_penalty : s.sampling.presence_penalty) = float(x);
    } else if (key == "steps") {
      s.diffusion.steps = get_int(value, key, 1, 1 << 20);
    } else if (key == "block_length") {
      s.diffusion.block_length = get_int(value, key, 1, 1 << 20);
    } else if (key == "threshold") {
      const double t = get_number(value, key);
      if (t < 0 || t > 1) throw bad(key, "'threshold' must be in [0, 1]");
      s.masked.threshold = float(t);
    } else if (key == "entropy_bound") {
      const double e = get_number(value, key);
      if (!(e > 0)) throw bad(key, "'entropy_bound' must be positive");
      s.uniform_state.entropy_bound = float(e);
    } else if (key == "cache") {
      const std::string c = get_string(value, key);
      if (c == "none") s.masked.cache = CacheMode::None;
      else if (c == "prefix") s.masked.cache = CacheMode::Prefix;
      else if (c == "dual") s.masked.cache = CacheMode::Dual;
      else throw bad(key, "'cache' must be none, prefix or dual");
    } else if (key == "mode") {
      const std::string m = get_string(value, key);
      if (m != "auto" && m != "diffusion" && m != "ar" && m != "verify")
        throw bad(key, "'mode' must be auto, diffusion, ar or verify");
      s.mode = parse_decode_mode(m);
    } else if (key == "draft_length") {
      s.verify.draft_length = get_int(value, key, 1, 1024);
    } else if (key == "draft_steps") {
      s.verify.draft_steps = get_int(value, key, 1, 64);
    } else if (key == "draft_lookup") {
      s.verify.draft_lookup = get_int(value, key, 0, 64);
    } else if (key == "draft_lookup_length") {
      s.verify.draft_lookup_length = get_int(value, key, 1, 1024);
    } else if (key == "draft_tree") {
      s.verify.draft_tree = get_int(value, key, 0, 63);
    } else if (key == "draft_tree_depth") {
      s.verify.draft_tree_depth = get_int(value, key, 1, 63);
    } else if (key == "overlap") {
      s.verify.overlap = get_bool(value, key);
    } else if (key == "suffix") {
      s.suffix = get_string(value, key);
    } else if (key == "response_format") {
      if (!value.is_object() || !value.contains("type") || !value["type"].is_string())
        throw bad(key, "'response_format' must be an object with a 'type'");
      const std::string type = value["type"].get<std::string>();
      try {
        if (type == "json_object") {
          s.json_schema = std::make_shared<const JsonTemplate>(json_object_template());
        } else if (type == "json_schema") {
          const json& spec = value.contains("json_schema") ? value["json_schema"] : json();
          if (!spec.is_object() || !spec.contains("schema"))
            throw bad(key, "'response_format.json_schema' must be an object with a 'schema'");
          // The body again with members in document order: properties are written in the schema's order.
          const nlohmann::ordered_json ordered = parse_json_ordered(body, "the request body");
          r.schema = std::make_shared<const nlohmann::ordered_json>(ordered["response_format"]["json_schema"]["schema"]);
          if (schema_compile == SchemaCompile::Now) {
            s.json_schema = compile_response_format(*r.schema);
            r.schema = nullptr;
          }
        } else if (type != "text") {
          throw bad(key, "'response_format.type' must be text, json_object or json_schema");
        }
      } catch (const Error& e) {
        throw bad(key, e.what());
      }
    } else if (key == "logit_bias") {
      // {"token id": bias in [-100, 100]}, added to those logits (SamplingParams); ids past the model's
      // vocabulary are refused once the model is known (check_admissible).
      if (!value.is_object()) throw bad(key, "'logit_bias' must be an object of token ids to biases");
      s.sampling.logit_bias.clear();
      for (const auto& [id, bias] : value.items()) {
        const bool number = !id.empty() && id.size() < 12 && id.find_first_not_of("0123456789") == std::string::npos;
        if (!number) throw bad(key, "'logit_bias' keys must be token ids (got '" + id + "')");
        const double b = get_number(bias, "logit_bias." + id);
        if (b < -100 || b > 100) throw bad(key, "'logit_bias' values must be between -100 and 100");
        const int64_t token = std::stoll(id);
        if (token > INT32_MAX) throw bad(key, "'logit_bias': token id " + id + " is outside the vocabulary");
        s.sampling.logit_bias.emplace_back(int32_t(token), float(b));
      }
    } else if (key == "tools" || key == "tool_choice" || key == "parallel_tool_calls") {
      parse_tools(key, value, r);
    } else if (key == "chat_template_kwargs") {
      parse_template_kwargs(value, r);
    } else if (key == "reasoning_effort") {
      reasoning_effort = reasoning_effort_of(value, key);
    } else if (key == "metadata" || key == "store" || key == "service_tier") {
      // OpenAI's bookkeeping: nothing to do here.
    } else if (key == "logprobs") {
      if (chat) {
        r.logprobs = get_bool(value, key);
      } else {
        s.logprobs = get_int(value, key, 0, kMaxTopLogprobs);
        r.logprobs = true;
      }
    } else if (key == "top_logprobs") {
      top_logprobs = get_int(value, key, 0, kMaxTopLogprobs);
    } else if (key == "echo") {
      r.echo = get_bool(value, key);
    } else if (key == "canvas_draft") {
      r.canvas_draft = get_bool(value, key);
    } else if (key == "parse_special") {
      s.parse_special = get_bool(value, key);
    } else if (key == "ignore_eos") {  // llama-server's: all max_tokens are generated
      s.ignore_eos = get_bool(value, key);
    }
  } catch (const json::exception&) {
    throw bad(key, "'" + key + "' has a value of the wrong type");
  }
  if (!r.seed_given) {
    // A fresh seed per request (reported in the response), so that a temperature above 0 samples anew each
    // time.
    s.sampling.seed = random_seed();
  }
  if (chat && top_logprobs >= 0 && !r.logprobs)
    throw bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  if (chat && r.logprobs) s.logprobs = std::max<int64_t>(0, top_logprobs);
  if (chat && !r.chat_extras.enable_thinking && !reasoning_effort.empty())
    r.chat_extras.enable_thinking = reasoning_effort != "none";
  if (chat && r.tools.is_array() && !r.tools.empty() && r.tool_choice != "none")
    // The tools in the client's member order (a template writes their parameters in it).
    r.chat_extras.tools = parse_json_ordered(body, "the request body")["tools"];
  // The Responses API's instructions come before the input, as a system message.
  if (!r.instructions.empty()) r.messages.insert(r.messages.begin(), text_message("system", r.instructions));
  if (!has_input)
    throw bad(input_field(endpoint), std::string("'") + input_field(endpoint) + "' is required");
  if (r.include_usage && !r.stream) throw bad("stream_options", "'stream_options' is only allowed with 'stream': true");
  return r;
}

std::string openai_finish_reason(const std::string& ended) {
  if (ended == "eos" || ended == "stop") return "stop";
  return ended == "cancelled" ? "cancelled" : "length";
}

std::string completion_text(const GenerationRequest& request, const GenerationOutput& out) {
  if (!request.suffix) return out.text;
  std::string text;
  for (const std::string& f : out.fills) text += f;
  return text;
}

json usage_json(const event::Finished& finished, Endpoint endpoint) {
  const int64_t prompt_tokens = finished.prompt_tokens, completion_tokens = finished.completion_tokens;
  const double tokens_per_forward =
      finished.passes > 0 ? double(completion_tokens) / double(finished.passes) : 0.0;
  const int64_t total = prompt_tokens + completion_tokens;
  json usage =
      endpoint == Endpoint::Responses
          ? json{{"input_tokens", prompt_tokens},
                 {"input_tokens_details", {{"cached_tokens", 0}, {"cache_write_tokens", 0}}},
                 {"output_tokens", completion_tokens},
                 {"output_tokens_details", {{"reasoning_tokens", 0}}},
                 {"total_tokens", total}}
          : json{{"prompt_tokens", prompt_tokens},
                 {"completion_tokens", completion_tokens},
                 {"total_tokens", total},
                 {"tokens_per_pass", tokens_per_forward}};  // the older name, kept for clients that read it
  usage["forward_passes"] = finished.passes;
  usage["tokens_per_forward"] = tokens_per_forward;
  return usage;
}

}  // namespace canvas::serve
