package io.github.kafkatieredrsm.spark;

import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.IntVector;
import org.apache.arrow.vector.TimeStampMicroTZVector;
import org.apache.arrow.vector.VarBinaryVector;
import org.apache.arrow.vector.VarCharVector;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A Spark {@code ColumnVector} over an Arrow vector's buffers, read at their addresses, for the columns
 * of Kafka's schema that every query reads (ints, longs, timestamps, binary, strings); any other column
 * (the headers' list of structs) goes through Spark's own {@link ArrowColumnVector}.
 *
 * <p>Why not {@code ArrowColumnVector} for all: Spark turns a batch into rows by asking, for each row,
 * {@code isNullAt} of every nullable column, and every column of Kafka's schema is nullable (Spark's
 * Kafka source's schema, which this source keeps). Through {@code ArrowColumnVector} each such call is
 * Arrow Java's checked read of the validity bit (bounds and reference-count checks), for columns with no
 * null at all: in an AvailableNow stream into the noop sink that was 41% of the task thread's samples,
 * and the checks on value reads another 13% (Java Flight Recorder). Here a column with no null answers
 * {@code false} without a read, and values are read as Spark's {@code OffHeapColumnVector} reads its own
 * memory ({@link Platform}), unchecked.
 *
 * <p>Why that is safe: the addresses are taken from the vectors after each batch is loaded ({@link
 * #reload}) and the batch stays loaded until Spark asks for the next one; Spark reads rows below the
 * batch's row count only, which the vectors were loaded with (Arrow's loader checks the buffers' sizes
 * against the row count).
 */
final class DirectArrowColumnVector extends ColumnVector {
  private enum Kind {
    INT,
    LONG,
    BINARY,
    STRING,
    OTHER
  }

  private final FieldVector vector;
  private final ArrowColumnVector checked;
  private final Kind kind;
  private long validity;
  private long offsets;
  private long data;
  private int nullCount;

  /** The vector for {@code vector}'s column; call {@link #reload} after each batch is loaded into it. */
  static DirectArrowColumnVector of(FieldVector vector) {
    return new DirectArrowColumnVector(vector, new ArrowColumnVector(vector));
  }

  private DirectArrowColumnVector(FieldVector vector, ArrowColumnVector checked) {
    super(checked.dataType());
    this.vector = vector;
    this.checked = checked;
    this.kind = kindOf(vector);
  }

  private static Kind kindOf(FieldVector vector) {
    if (vector instanceof IntVector) {
      return Kind.INT;
    }
    if (vector instanceof BigIntVector || vector instanceof TimeStampMicroTZVector) {
      return Kind.LONG;
    }
    if (vector instanceof VarBinaryVector) {
      return Kind.BINARY;
    }
    if (vector instanceof VarCharVector) {
      return Kind.STRING;
    }
    return Kind.OTHER;
  }

  /** The buffers' addresses and null count of the batch just loaded into the vector. */
  void reload() {
    if (kind == Kind.OTHER) {
      return;
    }
    nullCount = vector.getNullCount();
    validity = vector.getValidityBufferAddress();
    data = vector.getDataBufferAddress();
    if (kind == Kind.BINARY || kind == Kind.STRING) {
      offsets = vector.getOffsetBufferAddress();
    }
  }

  @Override
  public boolean hasNull() {
    return kind == Kind.OTHER ? checked.hasNull() : nullCount > 0;
  }

  @Override
  public int numNulls() {
    return kind == Kind.OTHER ? checked.numNulls() : nullCount;
  }

  @Override
  public boolean isNullAt(int rowId) {
    if (kind == Kind.OTHER) {
      return checked.isNullAt(rowId);
    }
    return nullCount > 0 && isNull(rowId);
  }

  private boolean isNull(int rowId) {
    return ((Platform.getByte(null, validity + (rowId >> 3)) >> (rowId & 7)) & 1) == 0;
  }

  @Override
  public int getInt(int rowId) {
    return kind == Kind.INT ? Platform.getInt(null, data + 4L * rowId) : checked.getInt(rowId);
  }

  @Override
  public long getLong(int rowId) {
    return kind == Kind.LONG ? Platform.getLong(null, data + 8L * rowId) : checked.getLong(rowId);
  }

  @Override
  public byte[] getBinary(int rowId) {
    if (kind != Kind.BINARY) {
      return checked.getBinary(rowId);
    }
    if (nullCount > 0 && isNull(rowId)) {
      return null;
    }
    int start = valueStart(rowId);
    int length = valueStart(rowId + 1) - start;
    byte[] bytes = new byte[length];
    Platform.copyMemory(null, data + start, bytes, Platform.BYTE_ARRAY_OFFSET, length);
    return bytes;
  }

  @Override
  public UTF8String getUTF8String(int rowId) {
    if (kind != Kind.STRING) {
      return checked.getUTF8String(rowId);
    }
    if (nullCount > 0 && isNull(rowId)) {
      return null;
    }
    int start = valueStart(rowId);
    return UTF8String.fromAddress(null, data + start, valueStart(rowId + 1) - start);
  }

  /** Where a binary or string value starts in the data buffer (its end: the next row's start). */
  private int valueStart(int rowId) {
    return Platform.getInt(null, offsets + 4L * rowId);
  }

  @Override
  public boolean getBoolean(int rowId) {
    return checked.getBoolean(rowId);
  }

  @Override
  public byte getByte(int rowId) {
    return checked.getByte(rowId);
  }

  @Override
  public short getShort(int rowId) {
    return checked.getShort(rowId);
  }

  @Override
  public float getFloat(int rowId) {
    return checked.getFloat(rowId);
  }

  @Override
  public double getDouble(int rowId) {
    return checked.getDouble(rowId);
  }

  @Override
  public ColumnarArray getArray(int rowId) {
    return checked.getArray(rowId);
  }

  @Override
  public ColumnarMap getMap(int rowId) {
    return checked.getMap(rowId);
  }

  @Override
  public Decimal getDecimal(int rowId, int precision, int scale) {
    return checked.getDecimal(rowId, precision, scale);
  }

  @Override
  public ColumnVector getChild(int ordinal) {
    return checked.getChild(ordinal);
  }

  @Override
  public void close() {
    checked.close();
  }
}
