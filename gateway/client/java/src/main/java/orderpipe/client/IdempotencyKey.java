package orderpipe.client;

/**
 * The {@code Idempotency-Key} request header
 * (draft-ietf-httpapi-idempotency-key-header): its value is a Structured
 * Field string (RFC 8941 sf-string), the key in double quotes.
 */
public final class IdempotencyKey {
  /** The header's name. */
  public static final String HEADER = "Idempotency-Key";

  private IdempotencyKey() {}

  /**
   * The header value for key: {@code r-1} becomes {@code "r-1"}, with {@code \}
   * and {@code "} escaped. An sf-string holds printable ASCII only, so any
   * other character is refused rather than sent mangled.
   */
  public static String of(String key) {
    if (key == null || key.isEmpty()) {
      throw new IllegalArgumentException("idempotency key must not be empty");
    }
    StringBuilder b = new StringBuilder(key.length() + 2).append('"');
    for (int i = 0; i < key.length(); i++) {
      char c = key.charAt(i);
      if (c < 0x20 || c > 0x7e) {
        throw new IllegalArgumentException("idempotency key holds a character an sf-string cannot: U+"
            + String.format("%04X", (int) c));
      }
      if (c == '"' || c == '\\') {
        b.append('\\');
      }
      b.append(c);
    }
    return b.append('"').toString();
  }
}
