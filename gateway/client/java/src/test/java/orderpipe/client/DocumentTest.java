package orderpipe.client;

import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.File;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * gateway/openapi.json keeps the shape the generator reads well, so every
 * team generates typed code from the 3.1 document itself: a const or enum
 * without a type becomes an untyped Object field (and unrelated error schemas
 * merged into one), and a boolean const a Python check against the string
 * "true".
 */
class DocumentTest {
  @Test
  void everyConstAndEnumHasItsType() throws IOException {
    JsonNode doc = new ObjectMapper().readTree(new File("../../openapi.json"));
    List<String> bad = new ArrayList<>();
    walk(doc, "#", bad);
    assertTrue(bad.isEmpty(), "schemas the generator mis-reads (give each const and enum its \"type\"; no boolean const): " + bad);
  }

  static void walk(JsonNode n, String at, List<String> bad) {
    if (n.isObject()) {
      // An example's value is data, not a schema.
      if (at.endsWith("/examples") || at.endsWith("/value") || at.endsWith("/example")) {
        return;
      }
      boolean constant = n.has("const") || (n.has("enum") && n.get("enum").isArray());
      if (constant && !n.has("type")) {
        bad.add(at);
      }
      if (n.has("const") && n.get("const").isBoolean()) {
        bad.add(at + " (boolean const)");
      }
      for (Map.Entry<String, JsonNode> e : n.properties()) {
        walk(e.getValue(), at + "/" + e.getKey(), bad);
      }
    } else if (n.isArray()) {
      for (int i = 0; i < n.size(); i++) {
        walk(n.get(i), at + "/" + i, bad);
      }
    }
  }
}
