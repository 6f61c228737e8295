from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from knowledge.analysis import analyze, clear_caches


@pytest.mark.parametrize("word", ["connected", "connecting", "connections", "Connection"])
def test_it_stems_inflections_to_one_stem(word):
    assert analyze(word) == analyze("connect")


def test_it_drops_english_stop_words():
    assert analyze("What is the lift of a wing in the slipstream?") == ["lift", "wing", "slipstream"]


def test_it_keeps_numbers_and_alphanumeric_codes_lowercased():
    tokens = analyze("BM25 beats TF-IDF per GB50204, version 3.5 of 2015")
    assert tokens == ["bm25", "beat", "tf", "idf", "gb50204", "version", "3.5", "2015"]


def test_it_adds_the_words_of_a_camel_case_name_to_the_name():
    assert analyze("VectorWeight: 0.7") == ["vectorweight", "vector", "weight", "0.7"]
    assert analyze("RAGAgentState") == ["ragagentst", "rag", "agent", "state"]
    assert analyze("BM25Weight") == ["bm25weight", "bm25", "weight"]


def test_a_question_in_words_shares_terms_with_the_camel_case_name_in_code():
    assert {"vector", "weight"} <= set(analyze("How is the vector weighted?")) & set(analyze("VectorWeight: 0.7"))


def test_a_lowercase_brand_name_still_matches_its_camel_case_spelling():
    assert set(analyze("postgresql")) <= set(analyze("PostgreSQL 15"))


@pytest.mark.parametrize("word", ["HTTP", "python", "Python", "FAQs", "OpenAI", "iPhone"])
def test_words_that_are_not_camel_case_stay_whole(word):
    assert len(analyze(word)) == 1


def test_it_splits_hyphenated_words_into_pieces():
    assert analyze("state-of-the-art") == ["state", "art"]


def test_it_segments_chinese_in_search_mode():
    tokens = analyze("中华人民共和国")
    assert {"中华", "人民", "共和国", "中华人民共和国"} <= set(tokens)


def test_it_lets_a_short_chinese_query_match_a_long_word():
    assert set(analyze("共和国")) <= set(analyze("中华人民共和国成立"))


def test_it_drops_chinese_stop_words_and_punctuation():
    tokens = analyze("混凝土的强度是关键，和模板有关。")
    assert "混凝土" in tokens and "强度" in tokens
    assert not {"的", "是", "和", "，", "。"} & set(tokens)


def test_it_splits_mixed_text_into_chinese_and_latin_runs():
    tokens = analyze("使用BM25检索English documents和GB 50204规范")
    assert {"使用", "bm25", "检索", "english", "document", "gb", "50204", "规范"} <= set(tokens)
    assert "和" not in tokens


def test_it_folds_full_width_characters():
    assert analyze("ＧＢ５０２０４") == ["gb50204"]


@pytest.mark.parametrize("text", ["", "   \n\t", "，。！？……", "!!! --- ???", "🙂🚀", "the of and"])
def test_it_returns_no_tokens_for_text_without_words(text):
    assert analyze(text) == []


def test_it_gives_the_same_tokens_from_many_threads():
    texts = [f"connected wings {i} 桥梁施工方案{i}" for i in range(200)]
    expected = [analyze(text) for text in texts]
    clear_caches()
    with ThreadPoolExecutor(max_workers=4) as pool:
        assert list(pool.map(analyze, texts)) == expected
