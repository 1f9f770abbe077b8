// UTF-8 validation and GPT-2's byte-level alphabet: the 256 bytes mapped one-to-one onto
// printable code points (printable Latin-1 bytes map to themselves, the other 68 bytes to
// U+0100..U+0143 in byte order), which is how HF vocab.json / merges.txt spell byte tokens
// ("Ġ" = byte 0x20). Inside dpft every token is stored as its raw bytes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dpft::tok {

inline constexpr size_t kNoInvalidByte = static_cast<size_t>(-1);

// Offset of the first byte of `s` that does not belong to a well-formed UTF-8 sequence
// (Unicode Table 3-7: no overlongs, no surrogates, nothing above U+10FFFF), or kNoInvalidByte.
size_t find_invalid_utf8(std::string_view s);

// Appends the UTF-8 encoding of code point `cp` (must be a scalar value).
void append_utf8(std::string& out, uint32_t cp);

// The code point GPT-2's byte-level alphabet assigns to byte `b`.
uint32_t byte_to_codepoint(uint8_t b);

// Raw bytes -> their byte-level spelling ("\x20world" -> "Ġworld").
std::string bytes_to_byte_level(std::string_view bytes);

// Byte-level spelling -> raw bytes. Returns false (and leaves `out` unspecified) when `s` is not
// valid UTF-8 or holds a code point outside the alphabet.
bool byte_level_to_bytes(std::string_view s, std::string& out);

}  // namespace dpft::tok
