#include "runtime/data/synthetic_text.hpp"

#include <cctype>
#include <string>

#include "base/check.hpp"
#include "runtime/data/splitmix.hpp"

namespace troupe {
namespace {

constexpr const char* kDeterminers[] = {"the", "a",  "this", "that", "every",
                                        "one", "my", "our",  "her",  "his"};
constexpr const char* kNames[] = {"Anna",  "Ben",   "Clara", "David", "Elena", "Frank", "Grace",
                                  "Henry", "Iris",  "Jack",  "Kate",  "Leo",   "Maria", "Noah",
                                  "Olga",  "Peter", "Rosa",  "Sam",   "Tom",   "Vera"};
constexpr const char* kPronouns[] = {"he", "she", "they", "we", "I", "it"};
constexpr const char* kAdjectives[] = {
    "old",    "young",  "small",  "large",  "quiet", "loud",    "bright",  "dark",    "warm",    "cold",
    "happy",  "sad",    "quick",  "slow",   "green", "red",     "blue",    "white",   "black",   "brown",
    "gentle", "strong", "tired",  "clever", "kind",  "strange", "empty",   "full",    "heavy",   "light",
    "soft",   "rough",  "narrow", "wide",   "tall",  "short",   "ancient", "modern",  "hidden",  "golden",
    "silent", "busy",   "proud",  "simple", "wild",  "calm",    "brave",   "curious", "careful", "famous"};
constexpr const char* kNouns[] = {
    "man",     "woman",   "child",  "dog",      "cat",      "bird",    "horse",   "fish",    "tree",
    "river",   "house",   "garden", "road",     "city",     "village", "forest",  "hill",    "mountain",
    "door",    "window",  "table",  "chair",    "book",     "letter",  "story",   "song",    "ship",
    "boat",    "train",   "car",    "bridge",   "field",    "farmer",  "teacher", "doctor",  "king",
    "queen",   "soldier", "sailor", "baker",    "market",   "school",  "church",  "tower",   "lamp",
    "fire",    "stone",   "flower", "apple",    "bread",    "cup",     "box",     "key",     "coat",
    "hat",     "bag",     "friend", "stranger", "neighbor", "girl",    "boy",     "student", "painter",
    "writer",  "lake",    "sea",    "island",   "castle",   "kitchen", "room",    "wall",    "street",
    "morning", "evening", "night",  "winter",   "summer",   "storm",   "cloud",   "moon",    "star",
    "sun"};
constexpr const char* kTransitiveVerbs[] = {
    "saw",      "found",      "took",    "made",    "brought", "carried", "opened", "closed", "watched",
    "followed", "helped",     "called",  "painted", "built",   "read",    "wrote",  "loved",  "liked",
    "wanted",   "needed",     "kept",    "left",    "met",     "knew",    "heard",  "held",   "pushed",
    "pulled",   "washed",     "cleaned", "fixed",   "broke",   "bought",  "sold",   "gave",   "showed",
    "visited",  "remembered", "forgot",  "noticed", "touched", "chose",   "lost",   "caught", "threw",
    "moved",    "filled",     "covered", "greeted", "thanked"};
constexpr const char* kIntransitiveVerbs[] = {
    "walked",  "ran",      "slept",    "laughed",   "smiled", "waited", "arrived", "left",
    "stayed",  "sang",     "danced",   "cried",     "jumped", "fell",   "rested",  "worked",
    "played",  "listened", "returned", "travelled", "sat",    "stood",  "spoke",   "dreamed",
    "hurried", "paused",   "shouted",  "whispered", "swam",   "climbed"};
constexpr const char* kAdverbs[] = {
    "slowly",  "quickly", "quietly", "loudly", "happily", "sadly",  "carefully", "suddenly", "gently",
    "again",   "always",  "never",   "often",  "soon",    "later",  "together",  "alone",    "early",
    "finally", "calmly",  "bravely", "softly", "eagerly", "rarely", "already"};
constexpr const char* kPrepositions[] = {"in",     "on",     "near",    "under", "over", "behind",
                                         "beside", "across", "through", "into",  "from", "with",
                                         "after",  "before", "around",  "along"};
constexpr const char* kConjunctions[] = {"and", "but", "so", "because", "while", "when"};
constexpr const char* kQuestionWords[] = {"why", "where", "when", "how"};

// A deterministic stream of integers; `below(n)` is uniform enough for text (n << 2^64).
class TextRng {
 public:
  explicit TextRng(uint64_t seed) : seed_(seed) {}
  uint64_t below(uint64_t n) { return splitmix_at(seed_, counter_++) % n; }
  bool chance(uint64_t percent) { return below(100) < percent; }
  template <class T, size_t N>
  const char* pick(T (&words)[N]) {
    return words[below(N)];
  }

 private:
  uint64_t seed_;
  uint64_t counter_ = 0;
};

void add_word(std::string& sentence, const char* word) {
  if (!sentence.empty()) sentence += ' ';
  sentence += word;
}

void add_noun_phrase(TextRng& rng, std::string& sentence) {
  add_word(sentence, rng.pick(kDeterminers));
  if (rng.chance(45)) add_word(sentence, rng.pick(kAdjectives));
  add_word(sentence, rng.pick(kNouns));
}

void add_subject(TextRng& rng, std::string& sentence) {
  const uint64_t kind = rng.below(10);
  if (kind < 2) {
    add_word(sentence, rng.pick(kNames));
  } else if (kind < 4) {
    add_word(sentence, rng.pick(kPronouns));
  } else {
    add_noun_phrase(rng, sentence);
  }
}

void add_predicate(TextRng& rng, std::string& sentence) {
  if (rng.chance(60)) {
    add_word(sentence, rng.pick(kTransitiveVerbs));
    if (rng.chance(15)) {
      add_word(sentence, rng.pick(kNames));
    } else {
      add_noun_phrase(rng, sentence);
    }
  } else {
    add_word(sentence, rng.pick(kIntransitiveVerbs));
    if (rng.chance(40)) add_word(sentence, rng.pick(kAdverbs));
  }
  if (rng.chance(50)) {
    add_word(sentence, rng.pick(kPrepositions));
    add_noun_phrase(rng, sentence);
  }
}

std::string make_statement(TextRng& rng) {
  std::string sentence;
  add_subject(rng, sentence);
  add_predicate(rng, sentence);
  if (rng.chance(30)) {
    sentence += ',';
    add_word(sentence, rng.pick(kConjunctions));
    add_subject(rng, sentence);
    add_predicate(rng, sentence);
  }
  sentence += rng.chance(90) ? '.' : '!';
  return sentence;
}

std::string make_question(TextRng& rng) {
  std::string sentence;
  add_word(sentence, rng.pick(kQuestionWords));
  add_word(sentence, "did");
  add_subject(rng, sentence);
  add_word(sentence, "go");
  add_word(sentence, rng.pick(kPrepositions));
  add_noun_phrase(rng, sentence);
  sentence += '?';
  return sentence;
}

std::string make_sentence(TextRng& rng) {
  std::string sentence = rng.chance(8) ? make_question(rng) : make_statement(rng);
  sentence[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(sentence[0])));
  return sentence;
}

}  // namespace

std::vector<uint8_t> generate_synthetic_text(int64_t bytes, uint64_t seed) {
  TROUPE_CHECK(bytes >= 0, "generate_synthetic_text needs a non-negative size");
  // A distinct stream from the one sample_sequences derives from the same seed.
  TextRng rng(seed ^ 0x7465787463727075ull);
  std::vector<uint8_t> text;
  text.reserve(static_cast<size_t>(bytes) + 256);
  int64_t sentences_left_in_paragraph = 3 + static_cast<int64_t>(rng.below(5));
  while (static_cast<int64_t>(text.size()) < bytes) {
    const std::string sentence = make_sentence(rng);
    text.insert(text.end(), sentence.begin(), sentence.end());
    if (--sentences_left_in_paragraph == 0) {
      text.push_back('\n');
      sentences_left_in_paragraph = 3 + static_cast<int64_t>(rng.below(5));
    } else {
      text.push_back(' ');
    }
  }
  text.resize(static_cast<size_t>(bytes));
  return text;
}

}  // namespace troupe
