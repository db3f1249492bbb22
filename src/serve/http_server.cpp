// HTTP endpoints of canvas serve: the handlers of the requests serve/http_connections.h reads, run on its
// event loop, and the late answers of completions, written as their generation's events arrive.
#include "serve/http_server.h"

#include <ifaddrs.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>
#include <variant>

#include "core/error.h"
#include "text/chat_template.h"
#include "decode/verify.h"
#include "io/json.h"
#include "serve/chat_answer.h"
#include "serve/openai.h"
#include "serve/responses.h"

namespace canvas::serve {

// Insertion-ordered: answers keep OpenAI's field order, and a legacy top_logprobs object lists its tokens
// most likely first.
using json = nlohmann::ordered_json;

namespace {

// JSON text; invalid UTF-8 (a byte-level model can emit any byte) becomes U+FFFD instead of an exception.
std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

void send_error(Response& res, int status, const std::string& message, const std::string& param = "",
                const std::string& code = "") {
  res.status = status;
  res.set_content(dump(error_json(status, message, param, code)), "application/json");
}

void send_unavailable(Response& res, const std::string& message, const std::string& code = "") {
  res.set_header("Retry-After", "1");
  send_error(res, 503, message, "", code);
}

// The answer of a job refused before the engine ran it (Job::refused): its ApiError (a 503 when the queue
// was full or the server is stopping), or a 400 with the message of any other error.
void send_refusal(Response& res, const std::exception_ptr& refused) {
  try {
    std::rethrow_exception(refused);
  } catch (const ApiError& e) {
    if (e.status == 503) send_unavailable(res, e.what(), e.code);
    else send_error(res, e.status, e.what(), e.param, e.code);
  } catch (const std::exception& e) {
    send_error(res, 400, e.what());
  }
}

std::atomic<int64_t> next_id{1};

// Bytes of a completion's plain-text prompt that the event loop encodes itself (microseconds); longer ones,
// and every chat, are encoded on a worker.
constexpr size_t kPromptEncodedOnTheLoop = 1024;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
  return s;
}

// The host name of a Host header or of an origin's authority, without the port ("[::1]:80" -> "::1"); ""
// when it is not an authority (parse_authority).
std::string host_name(const std::string& authority) {
  std::string host;
  int port = 0;
  return parse_authority(authority, host, port) ? host : std::string();
}

// The addresses of this machine's interfaces (for a server bound to every interface).
std::set<std::string> interface_addresses() {
  std::set<std::string> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || (a->ifa_addr->sa_family != AF_INET && a->ifa_addr->sa_family != AF_INET6)) continue;
    char text[NI_MAXHOST];
    const socklen_t length = a->ifa_addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    if (getnameinfo(a->ifa_addr, length, text, sizeof text, nullptr, 0, NI_NUMERICHOST) == 0) {
      std::string address = text;
      out.insert(lower(address.substr(0, address.find('%'))));  // without an IPv6 zone
    }
  }
  freeifaddrs(list);
  return out;
}

// The request body as a JSON object; "" when it is one, else the message for a 400.
std::string body_object(const Request& req, json& out) {
  try {
    out = parse_json(req.body, "the request body");
  } catch (const Error& e) {
    return std::string(e.what());
  }
  return out.is_object() ? std::string() : std::string("the request body must be a JSON object");
}

// What every answer to one completion request repeats (its id, model, ...) and how it is to be written.
struct CompletionReply {
  Endpoint endpoint = Endpoint::Completions;
  bool chat = false;
  std::string id, model_name;
  int64_t created = 0;
  bool draft = false;          // stream chunks carry the canvas
  bool include_usage = false;  // a last stream chunk carries the usage
  bool logprobs = false;       // choices carry the tokens' log-probabilities
  std::string echo;            // /v1/completions with echo: the prompt, written before the completion
  std::vector<int32_t> prompt;  // ... and its tokens (their log-probability entries are null)
  const TextTokenizer* tokenizer = nullptr;
  // Chat in a format with channels (its text has special tokens written out): the message is split into
  // reasoning_content, content and tool_calls (serve/chat_answer.h). Null: the text is the content.
  const ChatFormat* channels = nullptr;
  ResponseHead response_head;  // /v1/responses: what its Response object repeats
};

// An error of the generator in the request's words: its -n is max_tokens here.
std::string as_request_words(std::string message) {
  for (const auto& [cli, api] : {std::pair<std::string, std::string>{"raise -n", "raise max_tokens"}, {"; -n is ", "; max_tokens is "}})
    for (size_t at = message.find(cli); at != std::string::npos; at = message.find(cli, at + api.size()))
      message.replace(at, cli.size(), api);
  return message;
}

// A token's text (its id when there is no tokenizer); a special token, whose text decoding drops, by its
// name ("<turn|>").
std::string token_text(const TextTokenizer* tokenizer, int32_t id) {
  if (!tokenizer) return std::to_string(id);
  const std::string text = tokenizer->decode({id});
  return text.empty() ? tokenizer->token_piece(id) : text;
}

json utf8_bytes(const std::string& text) {
  json bytes = json::array();
  for (unsigned char ch : text) bytes.push_back(int(ch));
  return bytes;
}

// Chat's choices[].logprobs.content for lps[from, to): {token, logprob, bytes, top_logprobs}.
json chat_logprobs(const TextTokenizer* tokenizer, const std::vector<TokenLogprob>& lps, size_t from, size_t to) {
  json content = json::array();
  for (size_t i = from; i < to; ++i) {
    const TokenLogprob& lp = lps[i];
    json top = json::array();
    for (const auto& [id, logprob] : lp.top) {
      const std::string text = token_text(tokenizer, id);
      top.push_back({{"token", text}, {"logprob", logprob}, {"bytes", utf8_bytes(text)}});
    }
    const std::string text = token_text(tokenizer, lp.token);
    content.push_back({{"token", text}, {"logprob", lp.logprob}, {"bytes", utf8_bytes(text)}, {"top_logprobs", top}});
  }
  return json{{"content", content}};
}

// The legacy /v1/completions logprobs of tokens[from, to): {tokens, token_logprobs, top_logprobs, text_offset}.
// `lps` null: the tokens are the echoed prompt's, whose log-probabilities are null. Offsets count from `base`
// plus the text of the tokens before each one.
json legacy_logprobs(const TextTokenizer* tokenizer, const std::vector<int32_t>& tokens,
                     const std::vector<TokenLogprob>* lps, size_t from, size_t to, size_t base) {
  json out = {{"tokens", json::array()},
              {"token_logprobs", json::array()},
              {"top_logprobs", json::array()},
              {"text_offset", json::array()}};
  for (size_t i = from; i < to; ++i) {
    const size_t before =
        tokenizer ? tokenizer->decode(std::vector<int32_t>(tokens.begin(), tokens.begin() + i)).size() : 0;
    out["tokens"].push_back(token_text(tokenizer, tokens[i]));
    out["text_offset"].push_back(base + before);
    if (!lps) {
      out["token_logprobs"].push_back(nullptr);
      out["top_logprobs"].push_back(nullptr);
      continue;
    }
    out["token_logprobs"].push_back((*lps)[i].logprob);
    json top = json::object();
    for (const auto& [id, logprob] : (*lps)[i].top) top[token_text(tokenizer, id)] = logprob;
    out["top_logprobs"].push_back(top);
  }
  return out;
}

void append_legacy_logprobs(json& to, const json& more) {
  for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
    for (const json& v : more[key]) to[key].push_back(v);
}

// canvas's own fields of an answer: how the request was decoded.
json canvas_json(const Job& job, const event::Started& started, const event::Finished& finished) {
  return json{{"mode", decode_mode_name(started.mode)},
              {"mode_reason", started.reason},
              {"queue_ms", started.queued_ms},
              {"decode_ms", finished.decode_ms},
              {"tokens", finished.tokens},
              {"finish", finished.ended},
              {"seed", job.settings.sampling.seed}};
}

// The Response object of a finished /v1/responses request: the chat's answer, its thinking apart for a
// format with channels (tool calls are not written: a Responses request offers no tools here).
json response_body(const CompletionReply& reply, const event::Finished& finished, const json& extras) {
  std::string reasoning, text = finished.text;
  if (reply.channels) {
    const ChatAnswer answer = chat_answer(reply.channels, finished.text, finished.finish_reason);
    const json& content = answer.message["content"];
    text = content.is_string() ? content.get<std::string>() : std::string();
    reasoning = answer.message.value("reasoning_content", std::string());
  }
  return response_json(reply.response_head, reasoning, text, finished.finish_reason,
                       usage_json(finished, Endpoint::Responses), extras);
}

// The non-streamed answer of a finished request; `extras` its canvas fields (canvas_json).
json completion_body(const CompletionReply& reply, const event::Finished& finished, const json& extras) {
  if (reply.endpoint == Endpoint::Responses) return response_body(reply, finished, extras);
  json choice = {{"index", 0}, {"finish_reason", finished.finish_reason}};
  if (reply.chat) {
    ChatAnswer answer = chat_answer(reply.channels, finished.text, finished.finish_reason);
    choice["message"] = std::move(answer.message);
    choice["finish_reason"] = answer.finish_reason;
    choice["logprobs"] = reply.logprobs
                             ? chat_logprobs(reply.tokenizer, finished.logprobs, 0, finished.logprobs.size())
                             : json(nullptr);
  } else {
    choice["text"] = reply.echo + finished.text;
    choice["logprobs"] = nullptr;
    if (reply.logprobs) {
      const size_t n = std::min(finished.tokens.size(), finished.logprobs.size());
      json lps = legacy_logprobs(reply.tokenizer, reply.prompt, nullptr, 0, reply.prompt.size(), 0);
      append_legacy_logprobs(lps, legacy_logprobs(reply.tokenizer, finished.tokens, &finished.logprobs, 0, n,
                                                  reply.echo.size()));
      choice["logprobs"] = lps;
    }
  }
  return json{{"id", reply.id},
              {"object", reply.chat ? "chat.completion" : "text_completion"},
              {"created", reply.created},
              {"model", reply.model_name},
              {"choices", json::array({choice})},
              {"usage", usage_json(finished)},
              {"canvas", extras}};
}

// The canvas of a stream chunk with "canvas_draft": each position's text, null where it is masked.
json draft_tokens(const Engine& engine, const std::vector<int32_t>& canvas) {
  json pieces = json::array();
  const int32_t mask = engine.model().config.mask_token;
  const TextTokenizer* tokenizer = engine.generator().tokenizer();
  for (int32_t t : canvas) {
    if (mask >= 0 && t == mask)
      pieces.push_back(nullptr);
    else
      pieces.push_back(tokenizer ? tokenizer->decode({t}) : std::string());
  }
  return pieces;
}

// The positions of a draft that hold an id ending the text (EOS, padding, end of turn): the page draws no
// box for them and does not count them. None while the canvas is uniform-state noise (its ids are not
// decisions yet).
json draft_pad(const Engine& engine, const std::vector<int32_t>& canvas, bool noise) {
  json pad = json::array();
  if (noise) return pad;
  const std::vector<int32_t>& ends = engine.generator().stop_ids();
  for (size_t i = 0; i < canvas.size(); ++i)
    if (std::find(ends.begin(), ends.end(), canvas[i]) != ends.end()) pad.push_back(i);
  return pad;
}

// The late answer of a completion. No thread waits for it: the job's events wake the connection's event
// loop, which asks pump() for what is new; the answer reads the events it has not read yet (take(), one
// overload per kind) and writes what they add. Not streamed: the whole answer once the job has finished.
// Streamed: the head once the job has started, then a chunk per pump with the new text (and the latest step
// with canvas_draft: steps that end while the client is slow are seen together), the last chunk with the
// finish reason, the usage when asked, then [DONE]. A job the front end refused (the prompt) or the engine
// dropped (shutdown) before it started is answered as a whole, with its error or 503.
class CompletionAnswer final : public LateAnswer {
 public:
  CompletionAnswer(std::shared_ptr<Job> job, const Engine& engine, CompletionReply reply, bool stream,
                   bool fills, std::function<void()> untrack)
      : job_(std::move(job)),
        engine_(engine),
        reply_(std::move(reply)),
        stream_(stream),
        fills_(fills),
        untrack_(std::move(untrack)) {}

  // Whether an event of the job is worth waking the connection for (a stream without drafts: not its steps;
  // not streamed: only its end).
  static bool wants(const JobEvent& e, bool stream, bool draft) {
    return std::holds_alternative<event::Finished>(e) ||
           (stream && (!std::holds_alternative<event::CanvasStep>(e) || draft));
  }

  Progress pump(Response& res, std::string& chunk) override {
    for (JobEvent& e : job_->events.read(events_read_)) std::visit([this](auto& e) { take(e); }, e);
    if (!streaming_) {
      if (!finished_ && (!stream_ || !started_)) return Progress::Waiting;
      if (!reply_.echo.empty()) reply_.prompt = job_->prompt;  // set before the job was submitted
      if (!stream_ || (finished_ && (finished_->refused || finished_->dropped))) {
        whole(res);
        end();
        return Progress::Done;
      }
      res.status = 200;
      res.content_type = "text/event-stream";
      res.set_header("Cache-Control", "no-cache");
      res.set_header("X-Accel-Buffering", "no");  // nginx: pass events through as they come
      res.stream = true;
      streaming_ = true;
    }
    if (!next_chunks(chunk)) return Progress::Waiting;
    end();
    return Progress::Done;
  }

  void abandon() override {
    job_->cancel = true;  // the client is gone: the generation stops within a step
    end();
  }

 private:
  void end() {
    if (untrack_) untrack_();
    untrack_ = nullptr;
  }

  void take(event::Started& e) {
    mode_ = e.mode;
    started_ = std::move(e);
  }
  // A stream's text and log-probabilities wait for the next chunk; a whole answer takes them from Finished.
  void take(event::TextDelta& e) {
    if (!stream_) return;
    delta_ += e.text;
    for (TokenLogprob& lp : e.logprobs) {
      tokens_.push_back(lp.token);
      logprobs_.push_back(std::move(lp));
    }
  }
  void take(event::CanvasStep& e) {
    if (reply_.draft) step_ = std::move(e);  // the last one read is the newest, the only one with its canvas
  }
  void take(event::Finished& e) { finished_ = std::move(e); }

  // The answer of a job that did not stream (or never started): the JSON body or the error.
  void whole(Response& res) {
    const event::Finished& finished = *finished_;
    res.status = 200;
    if (finished.refused) return send_refusal(res, finished.refused);
    if (finished.dropped) return send_unavailable(res, "the server is shutting down; the request did not run");
    if (!finished.error.empty())
      return fills_ ? send_error(res, 400, as_request_words(finished.error),
                                 job_->settings.json_schema ? "response_format" : "suffix")
                    : send_error(res, 500, "generation failed: " + finished.error);
    res.set_content(dump(completion_body(reply_, finished, canvas_json(*job_, *started_, finished))),
                    "application/json");
  }

  // Every chunk names the mode the request is decoded in, as the non-streamed answer's canvas.mode.
  json envelope(json choices) const {
    return json{{"id", reply_.id},
                {"object", reply_.chat ? "chat.completion.chunk" : "text_completion"},
                {"created", reply_.created},
                {"model", reply_.model_name},
                {"choices", std::move(choices)},
                {"canvas", {{"mode", decode_mode_name(mode_)}}}};
  }

  // The log-probabilities read and not sent yet (those of the tokens the text read so far completes).
  json chunk_logprobs() {
    const size_t from = std::exchange(logprobs_sent_, logprobs_.size());
    if (reply_.chat) return chat_logprobs(reply_.tokenizer, logprobs_, from, logprobs_sent_);
    return legacy_logprobs(reply_.tokenizer, tokens_, &logprobs_, from, logprobs_sent_, reply_.echo.size());
  }

  json chunk_json(const std::string& delta, const json& finish) {
    const bool chat = reply_.chat;
    json choice = {{"index", 0}, {"finish_reason", finish}};
    if (chat) {
      choice["delta"] = json::object();
      if (first_) choice["delta"]["role"] = "assistant";
      if (!delta.empty() || !first_) choice["delta"]["content"] = delta;
      if (first_ && delta.empty()) choice["delta"]["content"] = "";
    } else {
      choice["text"] = first_ ? reply_.echo + delta : delta;
      choice["logprobs"] = nullptr;
    }
    if (reply_.logprobs) {
      choice["logprobs"] = chunk_logprobs();
      if (!chat && first_ && !reply_.echo.empty()) {  // the echoed prompt's entries come first
        json entries = legacy_logprobs(reply_.tokenizer, reply_.prompt, nullptr, 0, reply_.prompt.size(), 0);
        append_legacy_logprobs(entries, choice["logprobs"]);
        choice["logprobs"] = entries;
      }
    }
    first_ = false;
    return envelope(json::array({choice}));
  }

  // Appends the stream's events for what was read; true when the stream is complete.
  bool next_chunks(std::string& out) {
    auto send = [&](const json& j) { out += "data: " + dump(j) + "\n\n"; };
    const bool finished = finished_.has_value();
    const std::string delta = std::exchange(delta_, std::string());
    sent_ += delta;
    if (reply_.endpoint == Endpoint::Responses) return response_events(out, delta);
    if (finished && !finished_->error.empty()) {
      send(error_json(500, "generation failed: " + finished_->error));
      out += "data: [DONE]\n\n";
      return true;
    }
    if (reply_.channels) return channel_chunks(out, delta);
    if (!delta.empty() || reply_.draft || first_) {
      json j = chunk_json(delta, nullptr);
      if (reply_.draft) add_draft(j);
      send(j);
    }
    if (!finished) return false;
    json last = chunk_json("", finished_->finish_reason);
    if (reply_.chat) last["choices"][0]["delta"] = json::object();
    send(last);
    end_stream(out);
    return true;
  }

  // next_chunks for /v1/responses: the new text (`delta`) as Responses events (serve/responses.h); for a
  // format with channels its thinking as reasoning, its answer as the message's text.
  bool response_events(std::string& out, const std::string& delta) {
    if (first_) out += response_events_.start();
    first_ = false;
    const bool finished = finished_.has_value();
    if (finished && !finished_->error.empty()) {
      out += response_events_.fail("generation failed: " + finished_->error);
      return true;
    }
    if (!reply_.channels) {
      out += response_events_.text(delta);
    } else if (!delta.empty() || finished) {
      for (const json& d : channel_deltas_.next(sent_, finished)) {
        if (d.contains("reasoning_content")) out += response_events_.reasoning(d["reasoning_content"]);
        if (d.contains("content")) out += response_events_.text(d["content"]);
      }
    }
    if (!finished) return false;
    out += response_events_.finish(finished_->finish_reason, usage_json(*finished_, Endpoint::Responses),
                                   json{{"mode", decode_mode_name(mode_)}});
    return true;
  }

  // The canvas of a chunk with canvas_draft: the latest step's, the final one once finished.
  void add_draft(json& j) const {
    const bool finished = finished_.has_value();
    const bool noise = started_ && started_->uniform_state && !finished;
    const std::vector<int32_t>& canvas = finished ? finished_->canvas : step_.canvas;
    j["canvas"] = {{"mode", decode_mode_name(mode_)},
                   {"step", step_.step},
                   {"passes", finished ? finished_->passes : step_.passes},
                   {"tokens", draft_tokens(engine_, canvas)},
                   {"pad", draft_pad(engine_, canvas, noise)},
                   {"noise", noise}};
    // verify: the tokens from `drafts` on are drafts being checked, the ones before it are kept.
    if (!finished && step_.drafts_from >= 0 && step_.drafts_from < int64_t(canvas.size()))
      j["canvas"]["drafts"] = step_.drafts_from;
  }

  // After the last chunk: the usage when asked, then [DONE].
  void end_stream(std::string& out) {
    if (reply_.include_usage) {
      json u = envelope(json::array());
      u["usage"] = usage_json(*finished_);
      out += "data: " + dump(u) + "\n\n";
    }
    out += "data: [DONE]\n\n";
  }

  // next_chunks for a chat in a format with channels: the new text (`delta`) as reasoning_content, content
  // and tool_calls deltas, a chunk each in order (serve/chat_answer.h); the first carries the role, the first
  // of this call the log-probabilities, the last the canvas; a marker cut at the end of the text waits.
  bool channel_chunks(std::string& out, const std::string& delta) {
    const bool finished = finished_.has_value();
    std::vector<json> deltas = delta.empty() && !finished ? std::vector<json>() : channel_deltas_.next(sent_, finished);
    if (deltas.empty() && (reply_.draft || first_)) deltas.push_back({{"content", ""}});
    for (size_t i = 0; i < deltas.size(); ++i) {
      json choice = {{"index", 0}, {"finish_reason", nullptr}, {"delta", std::move(deltas[i])}};
      if (first_) choice["delta"]["role"] = "assistant";
      if (reply_.logprobs) choice["logprobs"] = chunk_logprobs();  // none after the first
      first_ = false;
      json j = envelope(json::array({choice}));
      if (reply_.draft && i + 1 == deltas.size()) add_draft(j);
      out += "data: " + dump(j) + "\n\n";
    }
    if (!finished) return false;
    json last = {{"index", 0},
                 {"finish_reason", channel_deltas_.finish_reason(finished_->finish_reason)},
                 {"delta", json::object()}};
    if (reply_.logprobs) last["logprobs"] = chunk_logprobs();
    out += "data: " + dump(envelope(json::array({last}))) + "\n\n";
    end_stream(out);
    return true;
  }

  const std::shared_ptr<Job> job_;
  const Engine& engine_;
  CompletionReply reply_;
  const bool stream_, fills_;
  std::function<void()> untrack_;  // once, when the answer ends
  bool streaming_ = false;         // the stream's head is out
  // The job's events read so far, and what they said.
  size_t events_read_ = 0;
  std::optional<event::Started> started_;
  event::CanvasStep step_;  // the latest, with canvas_draft
  std::optional<event::Finished> finished_;
  DecodeMode mode_ = DecodeMode::Diffusion;  // the mode the chunks name
  // The stream so far: the text read (`sent_`) and what of it is still to go out (`delta_`), the tokens
  // the text completes with their log-probabilities and how many of those went out, whether the first chunk
  // is still to come.
  std::string sent_, delta_;
  std::vector<int32_t> tokens_;
  std::vector<TokenLogprob> logprobs_;
  size_t logprobs_sent_ = 0;
  bool first_ = true;
  // A format with channels: what of `sent_` (the text read so far, markers included) has gone out.
  ChatDeltas channel_deltas_{reply_.channels};
  ResponseEvents response_events_{reply_.response_head};  // /v1/responses
};

// The late answer of a handler that runs on a worker thread (/tokenize, /detokenize: a body of up to the
// limit to encode): the response it filled, once it has.
class WorkerAnswer final : public LateAnswer {
 public:
  void set(Response response) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      response_ = std::move(response);
      done_ = true;
    }
    wakeup->notify();
  }
  Progress pump(Response& res, std::string&) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!done_) return Progress::Waiting;
    res = std::move(response_);
    return Progress::Done;
  }

 private:
  std::mutex mutex_;
  Response response_;
  bool done_ = false;
};

// Names on stderr, once per field and server process, the request fields accepted and ignored
// (ApiRequest::ignored), so that an operator sees what clients send without a line per request.
void log_ignored_fields(const std::vector<std::string>& fields) {
  static std::mutex mutex;
  static std::set<std::string> logged;  // bounded: clients choose the names
  std::lock_guard<std::mutex> lock(mutex);
  for (std::string field : fields) {
    if (field.size() > 64) field = field.substr(0, 64) + "...";
    for (char& ch : field)
      if (ch < 0x20 || ch == 0x7f) ch = '?';
    if (logged.size() < 256 && logged.insert(field).second)
      std::fprintf(stderr, "canvas serve: request field '%s' accepted and ignored (said once)\n", field.c_str());
  }
}

// The checks a completion request passes before it is queued (the prompt, the context, the mode): ApiError
// 400 when it fails one.
void check_admissible(const Engine& engine, const GenerationSettings& s, int64_t P, Endpoint endpoint) {
  const ModelConfig& c = engine.model().config;
  const char* input = input_field(endpoint);
  const std::string max_tokens = max_tokens_field(endpoint);
  if (P == 0) throw ApiError(400, "the prompt encodes to no tokens", input);
  const int64_t ctx = c.context_length > 0 ? c.context_length : (int64_t(1) << 30);
  if (P >= ctx)
    throw ApiError(400,
                   "the prompt (" + std::to_string(P) + " tokens) does not fit the model's context length " +
                       std::to_string(ctx) + " with room for one new token",
                   input, "context_length_exceeded");
  if (P + s.max_new_tokens > ctx)
    throw ApiError(400,
                   "the prompt (" + std::to_string(P) + " tokens) + " + max_tokens + " (" +
                       std::to_string(s.max_new_tokens) + ") exceed the model's context length " +
                       std::to_string(ctx),
                   max_tokens, "context_length_exceeded");
  if (s.mode == DecodeMode::Diffusion && !engine.has_diffusion())
    throw ApiError(400, "this model cannot decode by diffusion (no mask token); use 'mode': 'ar'", "mode");
  if (s.mode == DecodeMode::Ar && !engine.has_ar())
    throw ApiError(400, "this model cannot decode autoregressively; use 'mode': 'diffusion'", "mode");
  if (s.mode == DecodeMode::Verify && !supports_verify(c))
    throw ApiError(400,
                   "'mode': 'verify' drafts with a diffusion decoder and checks the drafts by a causal path on the "
                   "same weights (DiffusionGemma, or a uniform-state model); this model ('" + c.arch +
                       "') has not both: use 'mode': '" + (engine.has_ar() ? "ar" : "diffusion") + "'",
                   "mode");
  try {
    // The request as it would run in each mode the router may pick for it (one when it asks for one).
    GenerationSettings probe = s;
    for (const DecodeMode mode : engine.router().candidates(s)) {
      probe.mode = mode;
      engine.generator().check(probe, P);
    }
  } catch (const RequestRefused& e) {
    // The API's field for the option at fault.
    std::string param;
    switch (e.option) {
      case RefusedOption::Length: param = max_tokens; break;
      case RefusedOption::PresencePenalty: param = "presence_penalty"; break;
      case RefusedOption::FrequencyPenalty: param = "frequency_penalty"; break;
      case RefusedOption::LogitBias: param = "logit_bias"; break;
    }
    throw ApiError(400, e.what(), param, e.exceeds_context ? "context_length_exceeded" : "");
  } catch (const Error& e) {
    throw ApiError(400, e.what());
  }
}

}  // namespace

bool is_loopback_name(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

HttpServer::HttpServer(ServerOptions options) : options_(std::move(options)) {}

HttpServer::~HttpServer() = default;

void HttpServer::set_models(std::vector<ServedModel> models) {
  check(!models.empty() && !ready_.load(), "set_models: once, with at least one model");
  for (ServedModel& m : models) m.engine->set_metrics(&metrics_, m.id);
  models_ = std::move(models);
  ready_.store(true);
}

size_t HttpServer::max_connections() const {
  return connections_ ? connections_->limits().max_connections : 0;
}

bool HttpServer::bind(std::string& error) {
  ConnectionLimits limits;
  limits.body_limit = options_.body_limit;
  limits.max_connections = options_.max_connections;
  connections_ = std::make_unique<HttpConnections>(
      limits, [this](const Request& req, Response& res) { handle(req, res); },
      [this](const Request& req, Response& res) { finish(req, res); });
  if (!connections_->bind(options_.host, options_.port, error)) return false;
  port_ = connections_->port();
  workers_ = std::make_unique<WorkerThreads>("canvas-http",
                                             size_t(options_.http_threads > 0 ? options_.http_threads : 4));
  // The names a Host header may use for this server: its address, loopback names when it listens on
  // loopback, every interface's address when it listens on all of them.
  const std::string host =
      host_name(options_.host.find(':') != std::string::npos ? "[" + options_.host + "]" : options_.host);
  bound_names_.insert(host);
  if (is_loopback_name(host) || host == "0.0.0.0" || host == "::" || host.empty())
    bound_names_.insert({"localhost", "127.0.0.1", "::1"});
  if (host == "0.0.0.0" || host == "::" || host.empty())
    for (const std::string& address : interface_addresses()) bound_names_.insert(address);
  for (const std::string& name : options_.allowed_hosts) bound_names_.insert(host_name(name));
  check_host_ = options_.api_key.empty() || !options_.allowed_hosts.empty();
  routes();
  return true;
}

void HttpServer::serve() {
  connections_->run();
}

void HttpServer::track(const std::shared_ptr<Job>& job) {
  std::lock_guard<std::mutex> lock(jobs_mutex_);
  jobs_.insert(job);
}

void HttpServer::untrack(const std::shared_ptr<Job>& job) {
  job->cancel = true;  // no effect once finished; stops a generation whose client is gone
  std::lock_guard<std::mutex> lock(jobs_mutex_);
  jobs_.erase(job);
}

void HttpServer::stop(int64_t finish_ms, int64_t close_ms) {
  const auto start = std::chrono::steady_clock::now();
  auto wait_until = [&](int64_t ms, auto done) {
    while (!done() && std::chrono::steady_clock::now() < start + std::chrono::milliseconds(ms))
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  };
  auto in_flight = [&] {
    std::lock_guard<std::mutex> lock(jobs_mutex_);
    return jobs_.size();
  };
  draining_ = true;
  if (const auto* models = served())
    for (const ServedModel& m : *models) m.engine->drain();  // the queued ones: 503, they never ran
  if (connections_) connections_->drain();
  wait_until(finish_ms, [&] { return in_flight() == 0; });
  {
    std::lock_guard<std::mutex> lock(jobs_mutex_);
    for (const auto& job : jobs_) job->cancel = true;
  }
  if (connections_) {
    // The cancelled requests end within a step and send their last answer (finish_reason "cancelled").
    wait_until(close_ms, [&] { return in_flight() == 0 && connections_->busy_connections() == 0; });
    connections_->close();
  }
}

namespace {

// A handler's exceptions as answers: a request value of an unexpected type that a handler did not check is
// the client's error, told without the JSON library's text; anything else is the server's.
void run_handler(const Router::Handler& handler, const Request& req, Response& res) {
  try {
    handler(req, res);
  } catch (const json::exception&) {
    res = Response();
    send_error(res, 400, "a field of the request has a value of the wrong type");
  } catch (const std::exception& e) {
    res = Response();
    send_error(res, 500, e.what());
  }
}

}  // namespace

void HttpServer::handle(const Request& req, Response& res) {
  if (gate(req, res)) return;
  const Router::Route& route = *router_.find(req.path);  // the gate answered unknown paths
  if (!slow_paths_.count(req.path)) return run_handler(route.handler, req, res);
  auto answer = std::make_shared<WorkerAnswer>();
  workers_->post([answer, handler = &route.handler, req] {
    Response out;
    run_handler(*handler, req, out);
    answer->set(std::move(out));
  });
  res.late = answer;
}

void HttpServer::finish(const Request& req, Response& res) {
  metrics_.request_answered(router_.find(req.path) ? req.path : "other", res.status);
  const std::string& origin = req.header("Origin");
  if (!origin.empty() && origin_allowed_by_cors(origin)) {
    res.set_header("Access-Control-Allow-Origin", origin);
    res.set_header("Vary", "Origin");
  }
}

bool HttpServer::host_allowed(const std::string& host) const {
  if (!check_host_ || host.empty()) return true;  // HTTP/1.0 may omit Host (HTTP/1.1 must send it)
  const std::string name = host_name(host);
  return !name.empty() && (bound_names_.count(name) > 0 || bound_names_.count("*") > 0);
}

bool HttpServer::origin_allowed_by_cors(const std::string& origin) const {
  const auto& list = options_.cors_origins;
  return std::find(list.begin(), list.end(), "*") != list.end() ||
         std::find(list.begin(), list.end(), origin) != list.end();
}

bool HttpServer::authorized(const Request& req) const {
  if (options_.api_key.empty()) return true;
  // "Bearer KEY"; the scheme is case-insensitive (RFC 9110 11.1), the key is not.
  const std::string value = req.header("Authorization");
  const size_t space = value.find(' ');
  if (space == std::string::npos || lower(value.substr(0, space)) != "bearer") return false;
  const size_t key = value.find_first_not_of(' ', space);
  return key != std::string::npos && value.compare(key, std::string::npos, options_.api_key) == 0;
}

bool HttpServer::gate(const Request& req, Response& res) const {
  // DNS rebinding: a page of another site whose name resolves to this machine sends that name as Host.
  const std::string host = req.header("Host");
  if (!host_allowed(host)) {
    send_error(res, 403,
               "Host '" + host + "' is not this server's address (start canvas serve with --allowed-hosts " +
                   host_name(host) + " to accept it)",
               "", "host_not_allowed");
    return true;
  }
  // Browsers send Origin with cross-origin requests (and with same-origin POSTs): a page of another origin
  // runs nothing here unless --cors lets it, even a "simple" text/plain POST that needs no preflight.
  const std::string origin = req.header("Origin");
  if (!origin.empty()) {
    // The page's own origin: an http or https page served from the Host this request passed the Host check
    // with (an ftp:// or chrome-extension:// origin naming this host is another origin).
    const size_t scheme = origin.find("://");
    const std::string scheme_name = lower(origin.substr(0, scheme));
    const bool same_origin = scheme != std::string::npos && (scheme_name == "http" || scheme_name == "https") &&
                             !host_name(origin.substr(scheme + 3)).empty() &&
                             lower(origin.substr(scheme + 3)) == lower(host);
    if (!same_origin && !origin_allowed_by_cors(origin)) {
      send_error(res, 403,
                 "cross-origin request from '" + origin + "' refused (start canvas serve with --cors " +
                     origin + " to allow it)",
                 "", "origin_not_allowed");
      return true;
    }
  }
  const Router::Route* route = router_.find(req.path);
  if (!route) {
    send_error(res, 404, "no such endpoint: " + req.method + " " + req.path);
    return true;
  }
  const std::string& allowed = route->allow;
  if (req.method == "OPTIONS") {  // what the path takes; a CORS preflight when --cors allows the origin
    res.status = 204;
    res.set_header("Allow", allowed);
    if (!origin.empty() && origin_allowed_by_cors(origin)) {
      res.set_header("Access-Control-Allow-Methods", allowed);
      res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
      res.set_header("Access-Control-Max-Age", "600");
    }
    return true;
  }
  if (!route->takes(req.method)) {
    res.set_header("Allow", allowed);
    send_error(res, 405, req.method + " is not allowed on " + req.path + " (allowed: " + allowed + ")");
    return true;
  }
  const bool api = req.path.rfind("/v1/", 0) == 0 || req.path == "/tokenize" || req.path == "/detokenize" ||
                   req.path == "/props" || req.path == "/infill" || req.path == "/metrics";
  if (api && !authorized(req)) {
    send_error(res, 401, "missing or wrong API key (send 'Authorization: Bearer KEY')", "",
               "invalid_api_key");
    return true;
  }
  if (draining_ && req.method == "POST") {
    send_unavailable(res, "the server is shutting down");
    return true;
  }
  return false;
}

void HttpServer::routes() {
  auto to = [this](void (HttpServer::*handler)(const Request&, Response&)) {
    return [this, handler](const Request& req, Response& res) { (this->*handler)(req, res); };
  };
  router_.get("/health", to(&HttpServer::health));
  router_.get("/v1/models", to(&HttpServer::models));
  router_.get("/props", to(&HttpServer::props));
  router_.get("/metrics", to(&HttpServer::metrics));
  router_.get("/", to(&HttpServer::page));
  router_.post("/tokenize", to(&HttpServer::tokenize));
  router_.post("/detokenize", to(&HttpServer::detokenize));
  router_.post("/infill", to(&HttpServer::infill));
  for (const auto& [path, endpoint] :
       {std::pair<const char*, Endpoint>{"/v1/completions", Endpoint::Completions},
        {"/v1/chat/completions", Endpoint::ChatCompletions},
        {"/v1/responses", Endpoint::Responses}})
    router_.post(path, [this, endpoint = endpoint](const Request& req, Response& res) {
      complete(req, res, endpoint);
    });
  router_.post("/v1/embeddings", to(&HttpServer::embeddings));
  // Encoding a body of up to the limit may take a while: off the event loop.
  slow_paths_ = {"/tokenize", "/detokenize"};
}

namespace {

// The decoding modes an engine's model has.
json modes_of(const Engine& engine) {
  json modes = json::array();
  for (const DecodeMode mode : engine.generator().modes()) modes.push_back(decode_mode_name(mode));
  return modes;
}

// What "mode": "auto" runs now for a plain request at the current load, and why.
json auto_of(const Engine& engine) {
  const ModeChoice choice = engine.choose(GenerationSettings{});
  json j = {{"mode", decode_mode_name(choice.mode)}, {"reason", choice.reason}};
  if (choice.mode == DecodeMode::Verify) j["draft_length"] = choice.draft_length, j["overlap"] = choice.overlap;
  return j;
}

// One model's part of /health: its load, its batcher's counts, its modes and cost model.
json model_health(const ServedModel& m) {
  const Engine& engine = *m.engine;
  const StepBatcher& b = engine.batcher();
  return json{{"model", m.id},
              {"running", engine.running()},
              {"queued", engine.queued()},
              {"parallel", engine.options().parallel},
              {"queue", engine.options().queue},
              {"batches", b.batches()},
              {"batched_passes", b.passes()},
              {"largest_batch", b.largest_batch()},
              {"modes", modes_of(engine)},
              {"auto", auto_of(engine)},
              {"cost_model", engine.cost_model().describe()}};
}

}  // namespace

void HttpServer::health(const Request& req, Response& res) {
  const auto* models = served();
  if (!models || draining_) {
    res.status = 503;
    res.set_content(dump(json{{"status", models ? "stopping" : "loading"}}), "application/json");
    return;
  }
  if (!authorized(req)) {  // with --api-key, the details are for callers that hold it
    res.set_content(dump(json{{"status", "ok"}}), "application/json");
    return;
  }
  // The first model's fields at the top (what a single-model server answers), the counts summed over
  // the models, and each model's own under "models".
  json j = model_health(models->front());
  j["status"] = "ok";
  j["models"] = json::array();
  for (const ServedModel& m : *models) {
    json one = model_health(m);
    if (&m != &models->front())
      for (const char* key : {"running", "queued", "batches", "batched_passes"})
        j[key] = j[key].get<int64_t>() + one[key].get<int64_t>();
    j["largest_batch"] = std::max(j["largest_batch"].get<int64_t>(), one["largest_batch"].get<int64_t>());
    j["models"].push_back(std::move(one));
  }
  res.set_content(dump(j), "application/json");
}

void HttpServer::models(const Request&, Response& res) {
  const auto* models = served();
  if (!models) return send_unavailable(res, "the models are still loading");
  json data = json::array();
  for (const ServedModel& m : *models)
    data.push_back({{"id", m.id},
                    {"object", "model"},
                    {"created", m.created},
                    {"owned_by", "canvas"},
                    {"canvas",
                     {{"architecture", m.engine->model().config.arch},
                      {"chat", m.chat},
                      {"modes", modes_of(*m.engine)},
                      {"auto", auto_of(*m.engine)}}}});
  res.set_content(dump(json{{"object", "list"}, {"data", data}}), "application/json");
}

namespace {

// The model a request names (pick_model; `name` "" for none): null after answering 503 while the models
// load, or the pick's 404 / 400.
const ServedModel* model_for(const std::vector<ServedModel>* models, const std::string& name, bool chat,
                             Response& res) {
  if (!models) {
    send_unavailable(res, "the model is still loading");
    return nullptr;
  }
  try {
    return &pick_model(*models, name, chat);
  } catch (const ApiError& e) {
    send_error(res, e.status, e.what(), e.param, e.code);
    return nullptr;
  }
}

// The preamble of /tokenize and /detokenize: the body as a JSON object, the model its "model" field names
// (the first without one) and that model's tokenizer. Null after answering 503 while the models load, or
// 400 for a bad body or a model without a tokenizer.
const ServedModel* tokenizer_model(const std::vector<ServedModel>* models, const Request& req, json& body,
                                   Response& res) {
  if (!models) {
    send_unavailable(res, "the model is still loading");
    return nullptr;
  }
  if (const std::string e = body_object(req, body); !e.empty()) {
    send_error(res, 400, e);
    return nullptr;
  }
  if (body.contains("model") && !body["model"].is_string()) {
    send_error(res, 400, "'model' must be a string", "model");
    return nullptr;
  }
  const ServedModel* m = model_for(models, body.value("model", ""), false, res);
  if (m && !m->engine->generator().tokenizer()) {
    send_error(res, 400, "the model '" + m->id + "' has no tokenizer");
    return nullptr;
  }
  return m;
}

}  // namespace

// llama-server's helpers: /tokenize, /detokenize, /props, /infill. They take "model" (/props: ?model=) as
// the completions do; without it they answer for the first model.
void HttpServer::tokenize(const Request& req, Response& res) {
  json j;
  const ServedModel* m = tokenizer_model(served(), req, j, res);
  if (!m) return;
  const Engine* engine = m->engine;
  if (!j.contains("content") || !j["content"].is_string())
    return send_error(res, 400, "'content' must be a string", "content");
  if (j.contains("add_special") && !j["add_special"].is_boolean() && !j["add_special"].is_null())
    return send_error(res, 400, "'add_special' must be true or false", "add_special");
  const bool special = j.contains("add_special") && j["add_special"].is_boolean() && j["add_special"].get<bool>();
  const std::vector<int32_t> ids = engine->generator().tokenizer()->encode(j["content"].get<std::string>(), special);
  res.set_content(dump(json{{"tokens", ids}}), "application/json");
}

void HttpServer::detokenize(const Request& req, Response& res) {
  json j;
  const ServedModel* m = tokenizer_model(served(), req, j, res);
  if (!m) return;
  const Engine* engine = m->engine;
  if (!j.contains("tokens") || !j["tokens"].is_array())
    return send_error(res, 400, "'tokens' must be an array", "tokens");
  std::vector<int32_t> ids;
  for (const json& t : j["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= engine->model().config.vocab)
      return send_error(res, 400, "'tokens' must hold ids of the vocabulary", "tokens");
    ids.push_back(t.get<int32_t>());
  }
  res.set_content(dump(json{{"content", engine->generator().tokenizer()->decode(ids)}}), "application/json");
}

void HttpServer::props(const Request& req, Response& res) {
  const ServedModel* m = model_for(served(), req.param("model"), false, res);
  if (!m) return;
  const Engine* engine = m->engine;
  const ModelConfig& c = engine->model().config;
  json modes = modes_of(*engine);
  json models = json::array();
  for (const ServedModel& each : *served()) models.push_back(each.id);
  json props = {{"model", m->id},
                {"models", models},
                {"chat", m->chat},
                {"architecture", c.arch},
                {"n_ctx", c.context_length},
                {"n_vocab", c.vocab},
                {"modes", modes},
                {"default_mode", decode_mode_name(engine->options().default_mode)},
                {"auto", auto_of(*engine)},
                {"total_slots", engine->options().parallel},
                {"chat_template", engine->options().chat ? engine->options().chat->jinja : std::string()},
                {"chat_format", engine->options().chat ? engine->options().chat->name : std::string()}};
  res.set_content(dump(props), "application/json");
}

void HttpServer::metrics(const Request&, Response& res) {
  std::vector<ModelLoad> loads;
  if (const auto* models = served())
    for (const ServedModel& m : *models) loads.push_back({m.id, m.engine->queued(), m.engine->running()});
  res.set_content(metrics_.text(loads), "text/plain; version=0.0.4; charset=utf-8");
}

void HttpServer::page(const Request&, Response& res) {
  res.set_content(web_page_html(), "text/html; charset=utf-8");
}

void HttpServer::complete(const Request& req, Response& res, Endpoint endpoint) {
  if (!served()) return send_unavailable(res, "the model is still loading");
  const bool chat = endpoint != Endpoint::Completions;
  ApiRequest r;
  try {
    r = parse_api_request(req.body, endpoint,
                          SchemaCompile::Later);  // compiled on a worker, not on this loop
  } catch (const ApiError& e) {
    return send_error(res, e.status, e.what(), e.param, e.code);
  }
  const ServedModel* served_model = model_for(served(), r.model, chat, res);
  if (!served_model) return;
  Engine* engine = served_model->engine;
  // Tools and the thinking switch go to the chat template (the model's, when it has one: a built-in format
  // takes neither); the reply of a format with channels is split (serve/chat_answer.h).
  const ChatFormat* format = engine->options().chat;
  if (!r.tools.is_null() && !r.tools.empty() && (!format || format->jinja.find("tools") == std::string::npos))
    r.ignored.push_back("tools");
  const bool channels = chat && chat_answer_has_channels(format);
  log_ignored_fields(r.ignored);
  GenerationSettings& s = r.settings;
  apply_default_sampling(s.sampling, engine->options().sampling, r.sampling_given);
  if (chat) {
    s.messages = r.messages;
    s.chat_extras = r.chat_extras;
    s.special_text = channels;
  } else
    s.text = r.prompt;
  // Infilling (suffix) and structured output (response_format) take the prompt as text; the generator
  // checks them when it plans the canvas.
  const bool fills = Generator::fills_holes(s) || r.schema;
  if (fills && (r.logprobs || r.echo))
    return send_error(res, 400,
                      std::string("'") + (r.logprobs ? "logprobs" : "echo") +
                          "' is not available with infilling ('suffix', holes) or 'response_format'",
                      r.logprobs ? "logprobs" : "echo");
  auto job = std::make_shared<Job>();
  job->settings = s;
  job->model = served_model->id;
  CompletionReply reply;
  reply.endpoint = endpoint;
  reply.chat = chat;
  if (channels) reply.channels = format;
  const std::string number = std::to_string(next_id++);
  reply.id = std::string(chat ? "chatcmpl-" : "cmpl-") + number;
  reply.created = int64_t(std::time(nullptr));
  // The answer names the model as the request did (a single-model server accepts any name), else its id.
  reply.model_name = r.model.empty() ? served_model->id : r.model;
  if (endpoint == Endpoint::Responses) {
    reply.response_head = {number,
                           reply.model_name,
                           reply.created,
                           r.instructions,
                           s.max_new_tokens > 0 ? s.max_new_tokens : -1,
                           s.sampling.temperature,
                           s.sampling.top_p};
  }
  reply.draft = r.canvas_draft;
  reply.include_usage = r.include_usage;
  reply.logprobs = r.logprobs;
  if (r.echo) reply.echo = r.prompt;
  reply.tokenizer = engine->generator().tokenizer();
  auto answer = std::make_shared<CompletionAnswer>(job, *engine, std::move(reply), r.stream, fills,
                                                   [this, job] { untrack(job); });
  // The engine's events wake the connection (for a job not streamed, only its end does).
  job->listener = [stream = r.stream, draft = r.canvas_draft, wakeup = answer->wakeup](const JobEvent& e) {
    if (CompletionAnswer::wants(e, stream, draft)) wakeup->notify();
  };
  track(job);
  res.late = answer;
  if (r.schema) return compile_then_submit(*engine, job, r.schema);
  if (fills) {  // the generator plans the canvas from the text when the job runs
    if (!submit(*engine, job)) {
      untrack(job);
      res.late = nullptr;
      const ApiError busy = refusal(*engine);
      return send_unavailable(res, busy.what(), busy.code);
    }
    return;
  }
  // The prompt is encoded and checked against the context before the job is queued: a bad prompt is answered
  // 400 at once, whatever the queue holds. A short plain prompt takes microseconds and is encoded here; a
  // chat (its template's render) or a long text (up to the body limit) on a worker, not on the event loop.
  // A job refused there is answered through its Finished event.
  if (!chat && s.text.size() <= kPromptEncodedOnTheLoop) {
    try {
      admit(*engine, job, endpoint);
    } catch (const ApiError& e) {
      untrack(job);
      res.late = nullptr;
      if (e.status == 503) return send_unavailable(res, e.what(), e.code);
      return send_error(res, e.status, e.what(), e.param, e.code);
    }
    return;
  }
  workers_->post([this, engine, job, endpoint] {
    try {
      admit(*engine, job, endpoint);
    } catch (...) {
      refuse(*job, std::current_exception());
    }
  });
}

// canvas's models are generative: none has an embedding head, and a pooled hidden state of a diffusion
// decoder is not an embedding any retrieval was measured with. A clear 400 (not a 404, and not a 5xx that
// clients would retry) names the model, after the body and the model name are checked as elsewhere.
void HttpServer::embeddings(const Request& req, Response& res) {
  if (!served()) return send_unavailable(res, "the model is still loading");
  json body;
  if (const std::string e = body_object(req, body); !e.empty()) return send_error(res, 400, e);
  if (body.contains("model") && !body["model"].is_string() && !body["model"].is_null())
    return send_error(res, 400, "'model' must be a string", "model");
  const std::string name =
      body.contains("model") && body["model"].is_string() ? body["model"].get<std::string>() : "";
  const ServedModel* m = model_for(served(), name, false, res);
  if (!m) return;
  send_error(res, 400,
             "the model '" + m->id + "' (" + m->engine->model().config.arch +
                 ") is a generative model with no embedding head; canvas serve does not compute embeddings",
             "model", "embeddings_not_supported");
}

void HttpServer::compile_then_submit(Engine& engine, const std::shared_ptr<Job>& job,
                                     std::shared_ptr<const nlohmann::ordered_json> schema) {
  // The job is not the engine's yet: nothing else reads its settings until it is submitted or refused.
  workers_->post([this, engine = &engine, job, schema = std::move(schema)] {
    try {
      job->settings.json_schema = compile_response_format(*schema);
      if (!submit(*engine, job)) throw refusal(*engine);
    } catch (...) {
      refuse(*job, std::current_exception());
    }
  });
}

void HttpServer::refuse(Job& job, std::exception_ptr why) {
  event::Finished refused;
  refused.refused = std::move(why);
  job.append(std::move(refused));
}

void HttpServer::admit(Engine& engine, const std::shared_ptr<Job>& job, Endpoint endpoint) {
  std::vector<int32_t> prompt;
  try {
    prompt = engine.generator().prompt_of(job->settings);
  } catch (const ChatTemplateTooLong& e) {  // a conversation that cannot fit the context
    throw ApiError(400, e.what(), input_field(endpoint), "context_length_exceeded");
  } catch (const std::exception& e) {
    throw ApiError(400, std::string("cannot tokenize the prompt: ") + e.what(), input_field(endpoint));
  }
  check_admissible(engine, job->settings, int64_t(prompt.size()), endpoint);
  job->prompt = std::move(prompt);
  if (!submit(engine, job)) throw refusal(engine);
}

bool HttpServer::submit(Engine& engine, const std::shared_ptr<Job>& job) {
  return !draining_ && engine.submit(job);
}

ApiError HttpServer::refusal(const Engine& engine) const {
  if (draining_) return ApiError(503, "the server is shutting down");
  return ApiError(503,
                  "the server is busy: " + std::to_string(engine.queued()) + " requests are waiting (--queue " +
                      std::to_string(engine.options().queue) + "); retry later",
                  "", "server_busy");
}

namespace {

// The late answer of /infill: the filled text once the job has finished.
class InfillAnswer final : public LateAnswer {
 public:
  InfillAnswer(std::shared_ptr<Job> job, std::function<void()> untrack)
      : job_(std::move(job)), untrack_(std::move(untrack)) {}
  Progress pump(Response& res, std::string&) override {
    for (JobEvent& e : job_->events.read(events_read_)) {
      if (auto* started = std::get_if<event::Started>(&e)) started_ = std::move(*started);
      if (auto* finished = std::get_if<event::Finished>(&e)) finished_ = std::move(*finished);
    }
    if (!finished_) return Progress::Waiting;
    end();
    const event::Finished& finished = *finished_;
    res.status = 200;
    if (finished.refused) {  // its schema did not compile, or the queue was full
      send_refusal(res, finished.refused);
    } else if (finished.dropped) {
      send_unavailable(res, "the server is shutting down; the request did not run");
    } else if (!finished.error.empty()) {
      send_error(res, 400, finished.error);
    } else {
      std::string content;
      for (const std::string& f : finished.fills) content += f;
      res.set_content(dump(json{{"content", content},
                                {"tokens_predicted", finished.completion_tokens},
                                {"stop", true},
                                {"canvas",
                                 {{"mode", decode_mode_name(started_->mode)},
                                  {"mode_reason", started_->reason},
                                  {"decode_ms", finished.decode_ms},
                                  {"seed", job_->settings.sampling.seed}}}}),
                      "application/json");
    }
    return Progress::Done;
  }
  void abandon() override {
    job_->cancel = true;
    end();
  }

 private:
  void end() {
    if (untrack_) untrack_();
    untrack_ = nullptr;
  }
  const std::shared_ptr<Job> job_;
  std::function<void()> untrack_;
  size_t events_read_ = 0;
  std::optional<event::Started> started_;  // (only Finished wakes it: the events come all at once)
  std::optional<event::Finished> finished_;
};

}  // namespace

// llama-server's /infill: input_prefix, input_suffix, n_predict (and the sampling fields of
// /v1/completions); answers {"content": the filled text, ...}.
void HttpServer::infill(const Request& req, Response& res) {
  if (!served()) return send_unavailable(res, "the model is still loading");
  json j;
  if (const std::string e = body_object(req, j); !e.empty()) return send_error(res, 400, e);
  json completion = json::object();
  for (const auto& [key, value] : j.items()) {
    if (key == "input_prefix")
      completion["prompt"] = value;
    else if (key == "input_suffix")
      completion["suffix"] = value;
    else if (key == "n_predict")
      completion["max_tokens"] = value;
    else if (key == "prompt" || key == "input_extra" || key == "stream") {
      if (!(value.is_null() || value == "" || value == false || (value.is_array() && value.empty())))
        return send_error(res, 400, "'" + key + "' is not supported by /infill here", key);
    } else {
      completion[key] = value;
    }
  }
  if (!completion.contains("prompt")) completion["prompt"] = "";
  if (!completion.contains("suffix")) completion["suffix"] = "";
  ApiRequest r;
  try {
    r = parse_api_request(completion.dump(), false, SchemaCompile::Later);
  } catch (const ApiError& e) {
    return send_error(res, e.status, e.what(), e.param, e.code);
  }
  if (r.logprobs || r.echo)
    return send_error(res, 400, std::string("'") + (r.logprobs ? "logprobs" : "echo") + "' is not supported by /infill",
                      r.logprobs ? "logprobs" : "echo");
  const ServedModel* served_model = model_for(served(), r.model, false, res);
  if (!served_model) return;
  Engine* engine = served_model->engine;
  GenerationSettings& s = r.settings;
  s.text = r.prompt;
  auto job = std::make_shared<Job>();
  job->settings = s;
  job->model = served_model->id;
  auto answer = std::make_shared<InfillAnswer>(job, [this, job] { untrack(job); });
  job->listener = [wakeup = answer->wakeup](const JobEvent& e) {
    if (std::holds_alternative<event::Finished>(e)) wakeup->notify();
  };
  track(job);
  if (r.schema) {
    res.late = std::move(answer);
    return compile_then_submit(*engine, job, r.schema);
  }
  if (!engine->submit(job)) {
    untrack(job);
    return send_unavailable(res, draining_ ? "the server is shutting down" : "the server is busy; retry later",
                            draining_ ? "" : "server_busy");
  }
  res.late = std::move(answer);
}

}  // namespace canvas::serve
