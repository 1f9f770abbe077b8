// `dpft tokenize --tokenizer DIR --text TEXT [--json] [--special] [--add-special]
// [--tiktoken-family F]`: the ids and pieces of one text (docs/tokenizers.md).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <iostream>

#include "cli/app.hpp"
#include "core/tokenizer/load.hpp"

namespace dpft {

void register_tokenize(CLI::App& app, CliContext& ctx) {
  struct Options {
    std::string tokenizer, text, family;
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
  sub->add_option("--tiktoken-family", o->family, "family of a tiktoken file (default: detected)")
      ->check(CLI::IsMember(tok::kTiktokenFamilies));
  sub->callback([o, &ctx] {
    ctx.action = [o] {
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
