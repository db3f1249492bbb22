// JSON Schema (a subset) compiled to a template of fixed text and holes, each hole a regular language of
// compact JSON; the scaffold for any-order (diffusion) filling and the document language for left-to-right
// (AR) masking. Supported: type (one or a list), object with properties / required (optional properties
// allowed; no properties beyond those listed are produced), string with enum / const / pattern /
// minLength / maxLength, integer and number with minimum / maximum / exclusiveMinimum /
// exclusiveMaximum (integer bounds for number), boolean, null, array with items / minItems / maxItems,
// nested objects, anyOf, and the empty schema (any shallow JSON value). Annotations (title, description,
// default, examples, $schema, $id, $comment, additionalProperties) are ignored. Anything else throws
// Error naming the keyword and where it is.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "text/byte_automaton.h"

namespace canvas {

// One piece of a JSON template: fixed text, or a hole whose bytes form a string of `language`.
struct JsonSegment {
  std::string fixed;                        // the text of a fixed segment
  std::shared_ptr<const ByteDfa> language;  // a hole's values (compact JSON); null for fixed text
  int64_t min_bytes = 0, max_bytes = 0;     // of the hole's values; max -1: unbounded
  bool is_hole() const { return language != nullptr; }
};

// A document as fixed text and holes, in order. Whitespace may follow every hole (each ends where a JSON
// value ends), which is what lets a fixed-length diffusion hole hold a shorter value.
struct JsonTemplate {
  std::vector<JsonSegment> segments;
  // The whole document (fixed text and hole values concatenated, no whitespace).
  RegexPtr document() const;
  int64_t holes() const;
};

// Size limits, checked before anything is compiled, so that any schema compiles or is refused with a
// one-line Error within seconds (a 100,000-property schema used to run for minutes): schemas nested in
// properties / items / anyOf at most kMaxSchemaNesting deep, and at most kMaxSchemaProperties
// properties in the whole schema.
inline constexpr int kMaxSchemaNesting = 64;
inline constexpr int64_t kMaxSchemaProperties = 1000;

// Compiles a schema; origin names it in errors ("schema.json", "response_format"). Properties are written
// in the order the schema lists them, so pass an ordered_json (compile_json_schema_text parses one);
// a plain nlohmann::json has already sorted its keys.
JsonTemplate compile_json_schema(const nlohmann::ordered_json& schema, const std::string& origin);
JsonTemplate compile_json_schema(const nlohmann::json& schema, const std::string& origin);
JsonTemplate compile_json_schema_text(std::string_view text, const std::string& origin);
// OpenAI's response_format {"type": "json_object"}: any object whose values are scalars or flat
// arrays / objects of scalars.
JsonTemplate json_object_template();

}  // namespace canvas
