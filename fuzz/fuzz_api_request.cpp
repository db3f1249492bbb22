// Fuzz harness: an HTTP request body of canvas serve (/v1/completions, /v1/chat/completions and
// /v1/responses) parsed into a request; every rejection must be an ApiError (the server's 400), never a
// crash.
#include <cstdint>
#include <string>

#include "decode/text_model.h"
#include "serve/openai.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  using canvas::serve::Endpoint;
  for (Endpoint endpoint : {Endpoint::Completions, Endpoint::ChatCompletions, Endpoint::Responses}) {
    try {
      const canvas::serve::ApiRequest r = canvas::serve::parse_api_request(body, endpoint);
      if (r.chat) {
        canvas::ChatFormat format;  // the built-in Gemma 4 format, as a model without a template gets
        format.name = "gemma4";
        format.render(r.messages);
      }
    } catch (const canvas::serve::ApiError&) {
    }
  }
  return 0;
}
