// `dpft tokenize --tokenizer DIR --text TEXT [--json] [--special] [--add-special]
// [--tiktoken-family F] [--pair TEXT] [--max-length N]`: the ids and pieces of one text
// (docs/tokenizers.md); a WordPiece vocabulary (vocab.txt) also gives token types.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <iostream>

#include "cli/app.hpp"
#include "core/tokenizer/load.hpp"
#include "core/tokenizer/wordpiece.hpp"
#include "core/util/error.hpp"

namespace dpft {

void register_tokenize(CLI::App& app, CliContext& ctx) {
  struct Options {
    std::string tokenizer, text, family, pair;
    size_t max_length = 0;
    bool json = false, special = false, add_special = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand("tokenize", "encode a text with a tokenizer: ids and pieces");
  sub->add_option("--tokenizer", o->tokenizer, "tokenizer directory or file")->required();
  sub->add_option("--text", o->text, "the text to encode")->required();
  sub->add_flag("--json", o->json, "one JSON object {\"ids\": [...], \"pieces\": [...]}");
  sub->add_flag("--special", o->special,
                "text spelling a special token (<|im_end|>) becomes its id");
  sub->add_flag("--add-special", o->add_special, "add the bos/eos the tokenizer adds");
  sub->add_option("--pair", o->pair,
                  "WordPiece: a second segment: [CLS] text [SEP] pair [SEP], with token types");
  sub->add_option(
      "--max-length", o->max_length,
      "WordPiece with --add-special or --pair: truncate longest_first to this many ids");
  sub->add_option("--tiktoken-family", o->family, "family of a tiktoken file (default: detected)")
      ->check(CLI::IsMember(tok::kTiktokenFamilies));
  sub->callback([o, &ctx, sub] {
    ctx.action = [o, sub] {
      if (auto vocab = tok::find_wordpiece(o->tokenizer)) {  // BERT-style WordPiece
        tok::WordPiece wp = tok::WordPiece::load(*vocab);
        const bool pair = sub->count("--pair") > 0;
        tok::PairEncoding e;
        if (o->add_special || pair)
          e = wp.encode_pair(o->text,
                             pair ? std::optional<std::string_view>(o->pair) : std::nullopt,
                             o->max_length);
        else
          e.ids = wp.encode(o->text);
        nlohmann::json pieces = nlohmann::json::array();
        for (int64_t id : e.ids) pieces.push_back(wp.id_to_token(id));
        nlohmann::json out = {{"ids", e.ids}, {"pieces", pieces}};
        if (!e.type_ids.empty()) out["type_ids"] = e.type_ids;
        if (o->json) {
          std::cout << out.dump() << "\n";
        } else {
          std::cout << "ids (" << e.ids.size() << "): " << out["ids"].dump() << "\n"
                    << "pieces: " << pieces.dump() << "\n";
          if (!e.type_ids.empty()) std::cout << "type_ids: " << out["type_ids"].dump() << "\n";
        }
        return 0;
      }
      if (sub->count("--pair") || o->max_length > 0)
        throw ConfigError(
            "dpft tokenize: --pair and --max-length need a WordPiece (BERT) "
            "tokenizer: a vocab.txt or a WordPiece tokenizer.json");
      tok::Tokenizer t = tok::load_tokenizer(o->tokenizer, {o->family});
      tok::EncodeOptions opt;
      opt.allow_special = o->special;
      opt.add_special = o->add_special;
      std::vector<tok::TokenId> ids = t.encode(o->text, opt);
      nlohmann::json pieces = nlohmann::json::array();
      for (tok::TokenId id : ids) pieces.push_back(t.piece(id));
      nlohmann::json j_ids = ids;
      if (o->json) {
        std::cout << nlohmann::json{{"ids", j_ids}, {"pieces", pieces}}.dump() << "\n";
      } else {
        std::cout << "ids (" << ids.size() << "): " << j_ids.dump() << "\n"
                  << "pieces: " << pieces.dump() << "\n";
      }
      return 0;
    };
  });
}

}  // namespace dpft
